package talos

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

const inputManifests = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: alpha
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.11.5"
  controlPlaneEndpoint: https://alpha.example.internal:6443
  podNetwork: [10.244.0.0/16]
  serviceNetwork: [10.96.0.0/12]
  plugins:
    cni:
      type: cilium
  configPatches:
    - name: tenant-labels
      patch: |
        machine:
          nodeLabels:
            tier: tenant
    - name: tenant-time
      patch: |
        machine:
          time:
            servers: [time.example.internal]
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: alpha
    rezuscloud.io/role: worker
spec:
  count: 2
  providerClass: sim
  talosVersion: "1.12.6"
  providerConfig:
    shape: small
  configPatches:
    - name: group-labels
      patch: |
        machine:
          nodeLabels:
            tier: group
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: cp
  labels:
    rezuscloud.io/tenant: alpha
    rezuscloud.io/role: controlplane
spec:
  count: 1
  providerClass: sim
  providerConfig:
    shape: small
`

const inputPatches = `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: b-all
  labels:
    rezuscloud.io/tenant: alpha
spec:
  patch: |
    machine:
      nodeLabels:
        tier: all
        all: "yes"
---
apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: a-workers
  labels:
    rezuscloud.io/tenant: alpha
spec:
  targetRole: worker
  patch: |
    machine:
      nodeLabels:
        tier: workers
        workers: "yes"
---
apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: c-controlplane
  labels:
    rezuscloud.io/tenant: alpha
spec:
  targetRole: controlplane
  patch: |
    machine:
      nodeLabels:
        controlplane: "yes"
`

func loadTenant(t *testing.T, files map[string]string, name string) *schema.TenantDesired {
	t.Helper()
	fsys := fstest.MapFS{}
	for n, body := range files {
		fsys[n] = &fstest.MapFile{Data: []byte(body)}
	}
	desired, err := schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatalf("schema.Load: %v", err)
	}
	td := desired.Tenant(name)
	if td == nil {
		t.Fatalf("no tenant %s", name)
	}
	return td
}

func nodeGroup(t *testing.T, td *schema.TenantDesired, name string) *schema.NodeGroup {
	t.Helper()
	for _, ng := range td.NodeGroups {
		if ng.Metadata.Name == name {
			return ng
		}
	}
	t.Fatalf("no node group %s", name)
	return nil
}

func TestInputFor(t *testing.T) {
	td := loadTenant(t, map[string]string{"alpha.yaml": inputManifests, "patches.yaml": inputPatches}, "alpha")
	b := testSecrets(t)

	w := InputFor(td, nodeGroup(t, td, "workers"), b)
	type np struct{ Name, Source string }
	var got []np
	for _, p := range w.Patches {
		got = append(got, np{p.Name, p.Source})
	}
	want := []np{
		{"tenant-labels", "alpha.yaml:16"},
		{"tenant-time", "alpha.yaml:21"},
		{"b-all", "patches.yaml:8"},
		{"a-workers", "patches.yaml:22"},
		{"group-labels", "alpha.yaml:41"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("worker patches =\n%v\nwant\n%v", got, want)
	}
	if w.Role != RoleWorker || w.TalosVersion != "1.12.6" || w.CNI != CNICilium || w.ClusterName != "alpha" || w.ControlPlaneEndpoint != "https://alpha.example.internal:6443" {
		t.Errorf("worker input = role %s, talos %s, cni %s, cluster %s, endpoint %s", w.Role, w.TalosVersion, w.CNI, w.ClusterName, w.ControlPlaneEndpoint)
	}
	labels := load(t, render(t, w), ModeCloud).K8sNodeConfig().Labels()
	if labels["tier"] != "group" || labels["all"] != "yes" || labels["workers"] != "yes" || labels["controlplane"] != "" {
		t.Errorf("worker labels = %v", labels)
	}

	cp := InputFor(td, nodeGroup(t, td, "cp"), b)
	got = got[:0]
	for _, p := range cp.Patches {
		got = append(got, np{p.Name, p.Source})
	}
	want = []np{
		{"tenant-labels", "alpha.yaml:16"},
		{"tenant-time", "alpha.yaml:21"},
		{"b-all", "patches.yaml:8"},
		{"c-controlplane", "patches.yaml:36"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("control plane patches =\n%v\nwant\n%v", got, want)
	}
	if cp.TalosVersion != "1.11.5" {
		t.Errorf("control plane talos version = %s, want the tenant's", cp.TalosVersion)
	}
	labels = load(t, render(t, cp), ModeCloud).K8sNodeConfig().Labels()
	if labels["tier"] != "all" || labels["controlplane"] != "yes" || labels["workers"] != "" {
		t.Errorf("control plane labels = %v", labels)
	}
}

func TestInputForPatchErrorNamesManifest(t *testing.T) {
	broken := inputPatches + `---
apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: d-bad-dns
  labels:
    rezuscloud.io/tenant: alpha
spec:
  patch: |
    cluster:
      network:
        dnsDomain: "not a domain"
`
	td := loadTenant(t, map[string]string{"alpha.yaml": inputManifests, "patches.yaml": broken}, "alpha")
	_, err := MachineConfig(InputFor(td, nodeGroup(t, td, "workers"), testSecrets(t)))
	var pe *PatchError
	if !errors.As(err, &pe) || pe.Patch.Name != "d-bad-dns" || pe.Patch.Source != "patches.yaml:48" {
		t.Fatalf("err = %v, want a PatchError naming d-bad-dns at patches.yaml:48", err)
	}
}

// TestExamplesRender renders every node group of the example manifests into
// a machine config that Talos accepts.
func TestExamplesRender(t *testing.T) {
	dir := filepath.Join(testenv.Root(), "examples")
	desired, err := schema.Load(os.DirFS(dir), ".", nil)
	if err != nil {
		t.Fatalf("schema.Load(examples): %v", err)
	}
	if len(desired.Tenants) == 0 {
		t.Fatal("the examples declare no tenants")
	}
	b := testSecrets(t)
	n := 0
	for _, td := range desired.Tenants {
		for _, ng := range td.NodeGroups {
			in := InputFor(td, ng, b)
			cfg := load(t, render(t, in), ModeCloud)
			if cfg.K8sClusterConfig().ClusterName() != td.Tenant.Metadata.Name || cfg.Machine().Type().String() != ng.Role() {
				t.Errorf("%s/%s: cluster %s, type %s", td.Tenant.Metadata.Name, ng.Metadata.Name, cfg.K8sClusterConfig().ClusterName(), cfg.Machine().Type())
			}
			n++
		}
	}
	t.Logf("%d node groups of %d tenants render", n, len(desired.Tenants))
}
