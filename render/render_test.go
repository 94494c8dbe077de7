package render

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/render/provider/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testSecrets returns a Talos secrets bundle made for these tests only: its
// keys protect nothing.
func testSecrets(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "secrets.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadExamples(t *testing.T) *schema.Desired {
	t.Helper()
	d, err := schema.Load(os.DirFS(filepath.Join(testenv.Root(), "examples")), ".", nil)
	if err != nil {
		t.Fatalf("load examples: %v", err)
	}
	return d
}

// TestGolden renders every example tenant, and those of testdata/cases,
// and compares the workspace with testdata/golden/TENANT.tf.json and its
// variables (the machine configs) with TENANT.tfvars.json. Run with
// -update to rewrite them.
func TestGolden(t *testing.T) {
	d := loadExamples(t)
	if len(d.Tenants) < 4 {
		t.Fatalf("examples hold %d tenants, want at least 4 (sim, openstack, oci)", len(d.Tenants))
	}
	cases, err := schema.Load(os.DirFS(filepath.Join("testdata", "cases")), ".", nil)
	if err != nil {
		t.Fatalf("load testdata/cases: %v", err)
	}
	if probs := Builtin().Validate(cases); len(probs) > 0 {
		t.Fatalf("testdata/cases: %v", probs)
	}
	for _, td := range append(d.Tenants, cases.Tenants...) {
		ws, err := Builtin().Render(td, testSecrets(t))
		if err != nil {
			t.Fatalf("render %s: %v", td.Tenant.Metadata.Name, err)
		}
		vars, err := ws.VarFile()
		if err != nil {
			t.Fatal(err)
		}
		for suffix, got := range map[string][]byte{".tf.json": ws.Files[MainFile], ".tfvars.json": vars} {
			golden := filepath.Join("testdata", "golden", td.Tenant.Metadata.Name+suffix)
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./render -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render of %s differs from %s:\n%s", td.Tenant.Metadata.Name, golden, got)
			}
		}
	}
}

// TestDeterministic renders the same desired state many times, loading it
// afresh each time, and expects byte-identical workspaces.
func TestDeterministic(t *testing.T) {
	first := map[string]string{}
	for i := 0; i < 20; i++ {
		for _, td := range loadExamples(t).Tenants {
			ws, err := Builtin().Render(td, testSecrets(t))
			if err != nil {
				t.Fatal(err)
			}
			name := td.Tenant.Metadata.Name
			if prev, ok := first[name]; ok && prev != ws.Hash {
				t.Fatalf("render %d of %s gave hash %s, first gave %s", i, name, ws.Hash, prev)
			}
			first[name] = ws.Hash
		}
	}
}

func TestRenderShape(t *testing.T) {
	var prod *schema.TenantDesired
	for _, td := range loadExamples(t).Tenants {
		if td.Tenant.Metadata.Name == "production" {
			prod = td
		}
	}
	if prod == nil {
		t.Fatal("no production tenant in examples")
	}
	ws, err := Builtin().Render(prod, testSecrets(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Terraform struct {
			Backend           map[string]map[string]any `json:"backend"`
			RequiredProviders map[string]map[string]any `json:"required_providers"`
		} `json:"terraform"`
		Resource map[string]map[string]map[string]any `json:"resource"`
	}
	if err := json.Unmarshal(ws.Files[MainFile], &doc); err != nil {
		t.Fatal(err)
	}
	if http, ok := doc.Terraform.Backend["http"]; !ok || len(http) != 0 {
		t.Errorf("backend = %v, want an empty http block (address and credentials come from the environment)", doc.Terraform.Backend)
	}
	if src := doc.Terraform.RequiredProviders["rezussim"]["source"]; src != sim.Source {
		t.Errorf("required provider source = %v, want %s", src, sim.Source)
	}
	cp := doc.Resource["rezussim_machine"]["ng_controlplane"]
	if cp["count"] != float64(3) || cp["role"] != "controlplane" || cp["shape"] != "medium" || cp["tenant"] != "production" {
		t.Errorf("controlplane resource = %v", cp)
	}
	if !strings.Contains(string(ws.Files[MainFile]), "${count.index}") {
		t.Errorf("names do not use count.index:\n%s", ws.Files[MainFile])
	}
}

func TestSimValidate(t *testing.T) {
	fsys := fstest.MapFS{
		"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
  providerConfig:
    shape: huge
    flavor: x
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: metal
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: metal
`)},
	}
	d, err := schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	probs := Builtin().Validate(d)
	want := []string{
		`t.yaml:22:1: /spec/providerConfig/flavor: sim providerConfig has no field "flavor"`,
		`t.yaml:21:1: /spec/providerConfig/shape: sim providerConfig.shape "huge" is not offered`,
		`t.yaml:31:1: /spec/providerConfig: metal providerConfig needs the field "machines"`,
	}
	without := Builtin()
	delete(without, "metal")
	if p := without.Validate(d); len(p) != 3 || !strings.HasPrefix(p[2].String(), `t.yaml:33:1: /spec/providerClass: providerClass "metal" has no provider module in this build`) {
		t.Errorf("without the metal module: %v", p)
	}
	if len(probs) != len(want) {
		t.Fatalf("got %d problems, want %d: %v", len(probs), len(want), probs)
	}
	for _, w := range want {
		found := false
		for _, p := range probs {
			if strings.HasPrefix(p.String(), w) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem %q in %v", w, probs)
		}
	}
}

func TestRenderTalos(t *testing.T) {
	var prod *schema.TenantDesired
	for _, td := range loadExamples(t).Tenants {
		if td.Tenant.Metadata.Name == "production" {
			prod = td
		}
	}
	ws, err := Builtin().Render(prod, testSecrets(t))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Variable map[string]map[string]any            `json:"variable"`
		Resource map[string]map[string]map[string]any `json:"resource"`
		Removed  []map[string]any                     `json:"removed"`
	}
	if err := json.Unmarshal(ws.Files[MainFile], &doc); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{SecretsVariable, MachineConfigVariable("controlplane"), MachineConfigVariable("workers")} {
		v := doc.Variable[name]
		if _, has := v["default"]; v["sensitive"] != true || v["type"] != "string" || has {
			t.Errorf("variable %s = %v, want a sensitive string without a default", name, v)
		}
	}
	if len(doc.Variable) != 3 || len(ws.Variables) != 3 {
		t.Errorf("%d variables declared, %d with values, want 3 of each", len(doc.Variable), len(ws.Variables))
	}
	if ws.Variables[SecretsVariable] != string(testSecrets(t)) {
		t.Errorf("secrets variable holds %d bytes, not the bundle", len(ws.Variables[SecretsVariable]))
	}
	td := doc.Resource["terraform_data"]["talos_bundle"]
	if len(td) != 2 || td["triggers_replace"] != "${var."+SecretsVariable+"}" || fmt.Sprint(td["lifecycle"]) != "map[ignore_changes:[triggers_replace]]" {
		t.Errorf("%s = %v, want the bundle in triggers_replace, whose changes are ignored, and nothing else", SecretsResource, td)
	}
	if _, has := doc.Resource["terraform_data"]["talos_secrets"]; has {
		t.Errorf("the workspace declares %s", FormerSecretsResource)
	}
	if fmt.Sprint(doc.Removed) != "[map[from:terraform_data.talos_secrets lifecycle:map[destroy:false]]]" {
		t.Errorf("removed blocks %v, want one that forgets %s without destroying it", doc.Removed, FormerSecretsResource)
	}
	for ng, res := range map[string]string{"controlplane": "ng_controlplane", "workers": "ng_workers"} {
		if got := doc.Resource["rezussim_machine"][res]["user_data"]; got != "${var."+MachineConfigVariable(ng)+"}" {
			t.Errorf("%s user_data = %.40q, want a reference to its variable", res, got)
		}
	}
	cp := ws.Variables[MachineConfigVariable("controlplane")]
	wk := ws.Variables[MachineConfigVariable("workers")]
	for _, c := range []struct {
		name, cfg, want string
		has             bool
	}{
		{"controlplane type", cp, "type: controlplane", true},
		{"worker type", wk, "type: worker", true},
		{"tenant-wide patch on control plane", cp, "time.cloudflare.com", true},
		{"tenant-wide patch on workers", wk, "time.cloudflare.com", true},
		{"controlplane-only patch on control plane", cp, "audit-log-maxage", true},
		{"controlplane-only patch kept off workers", wk, "audit-log-maxage", false},
		{"worker node-group patch on workers", wk, "node.example.internal/pool", true},
		{"worker node-group patch kept off control plane", cp, "node.example.internal/pool", false},
		{"cilium disables the default CNI", cp, "name: none", true},
		{"endpoint", cp, "https://127.250.0.1:6443", true},
	} {
		if strings.Contains(c.cfg, c.want) != c.has {
			t.Errorf("%s: contains %q = %v, want %v", c.name, c.want, !c.has, c.has)
		}
	}
}

// TestNoSecretsInFiles renders every example and expects no key, token or
// bundle in the workspace's files, and a hash that changes with the
// secrets although the files do not.
func TestNoSecretsInFiles(t *testing.T) {
	secrets := testSecrets(t)
	for _, td := range loadExamples(t).Tenants {
		ws, err := Builtin().Render(td, secrets)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range ws.Files {
			for _, leak := range []string{string(secrets[:60]), "BEGIN", "LS0tLS1CRUdJ", "machine:", "token:"} {
				if strings.Contains(string(b), leak) {
					t.Errorf("%s: %s holds %q", td.Tenant.Metadata.Name, name, leak)
				}
			}
		}
		vars, err := ws.VarFile()
		if err != nil {
			t.Fatal(err)
		}
		var values map[string]string
		if err := json.Unmarshal(vars, &values); err != nil || len(values) != len(ws.Variables) {
			t.Fatalf("var file: %v, %d values", err, len(values))
		}
		other, err := Builtin().Render(td, append(bytes.Clone(secrets), '\n'))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(other.Files[MainFile], ws.Files[MainFile]) || other.Hash == ws.Hash {
			t.Errorf("%s: other secrets: files equal %v, hash equal %v; want equal files, other hash", td.Tenant.Metadata.Name,
				bytes.Equal(other.Files[MainFile], ws.Files[MainFile]), other.Hash == ws.Hash)
		}
	}
}

func TestPlaceholderVarFile(t *testing.T) {
	ws, err := Builtin().Render(loadExamples(t).Tenants[0], testSecrets(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := PlaceholderVarFile(ws.Files[MainFile])
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ws.Variables) {
		t.Fatalf("placeholders %v, want one for each of %d variables", got, len(ws.Variables))
	}
	for name := range ws.Variables {
		if v, ok := got[name]; !ok || v != "" {
			t.Errorf("placeholder of %s = %q, %v; want an empty value", name, v, ok)
		}
	}
	if _, err := PlaceholderVarFile([]byte("not json")); err == nil {
		t.Error("PlaceholderVarFile of a broken workspace: no error")
	}
}

func TestValidateTalosNamesThePatch(t *testing.T) {
	fsys := fstest.MapFS{
		"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
---
apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: broken
  labels:
    rezuscloud.io/tenant: acme
spec:
  targetRole: worker
  patch: |
    cluster:
      network:
        podSubnets:
          - not-a-cidr
`)},
	}
	d, err := schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	probs := ValidateTalos(d.Tenants[0])
	if len(probs) != 1 || probs[0].File != "t.yaml" || probs[0].Line != 29 || !strings.Contains(probs[0].Message, `"broken"`) {
		t.Fatalf("problems %v, want one naming patch broken at t.yaml:29", probs)
	}
	// The same patch aimed at control planes leaves this tenant (workers only) valid.
	fsys["t.yaml"].Data = []byte(strings.Replace(string(fsys["t.yaml"].Data), "targetRole: worker", "targetRole: controlplane", 1))
	d, err = schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if probs := ValidateTalos(d.Tenants[0]); len(probs) != 0 {
		t.Fatalf("a patch for roles the tenant has none of was applied: %v", probs)
	}
}

// A patch that changes what the secrets bundle owns is refused with the
// file:line of its text, wherever the tenant declares it: in the tenant's
// configPatches, in a ConfigPatch, or in a node group's configPatches.
func TestValidateTalosRefusesBundleFields(t *testing.T) {
	const tenant = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
  configPatches:
    - name: labels
      patch: |
        machine:
          nodeLabels:
            a: b
%s`
	const group = `---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
%s`
	const configPatch = `---
apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: trust-mine
  labels:
    rezuscloud.io/tenant: acme
spec:
  patch: |
    - op: add
      path: /machine/acceptedCAs
      value:
        - crt: Y3J0
`
	for _, tc := range []struct {
		name, yaml, patch, field string
		line                     int
	}{
		{"tenant", fmt.Sprintf(tenant, "    - name: own-ca\n      patch: |\n        machine:\n          ca:\n            crt: Y3J0\n            key: a2V5\n") + fmt.Sprintf(group, ""),
			"own-ca", "set machine.ca:", 16},
		{"config patch", fmt.Sprintf(tenant, "") + fmt.Sprintf(group, "") + configPatch,
			"trust-mine", "set machine.acceptedCAs:", 34},
		{"node group", fmt.Sprintf(tenant, "") + fmt.Sprintf(group, "  configPatches:\n    - name: new-token\n      patch: |\n        - op: replace\n          path: /cluster/token\n          value: abcdef.0123456789abcdef\n"),
			"new-token", "set cluster.token:", 28},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := schema.Load(fstest.MapFS{"t.yaml": {Data: []byte(tc.yaml)}}, ".", nil)
			if err != nil {
				t.Fatal(err)
			}
			probs := ValidateTalos(d.Tenants[0])
			if len(probs) != 1 {
				t.Fatalf("problems %v, want one", probs)
			}
			p := probs[0]
			if p.File != "t.yaml" || p.Line != tc.line || !strings.Contains(p.Message, `"`+tc.patch+`"`) ||
				!strings.Contains(p.Message, tc.field) || !strings.Contains(p.Message, "cluster keys are not rotated with a patch") {
				t.Errorf("problem %s, want one at t.yaml:%d naming patch %s and %q", p, tc.line, tc.patch, tc.field)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	secrets := testSecrets(t)
	for _, td := range loadExamples(t).Tenants {
		ws, err := Builtin().Render(td, secrets)
		if err != nil {
			t.Fatal(err)
		}
		red, err := Redact(ws.Files[MainFile])
		if err != nil {
			t.Fatal(err)
		}
		for _, leak := range []string{string(secrets[:60]), "BEGIN", "machine:", "secretboxEncryptionSecret", "token:"} {
			if strings.Contains(string(red), leak) {
				t.Errorf("%s: redacted workspace still holds %q", td.Tenant.Metadata.Name, leak)
			}
		}
		cloud := strings.Contains(string(red), `"user_data": "(sensitive)"`) && strings.Contains(string(red), `"count": `)
		metal := strings.Contains(string(red), `"for_each": {`) && !strings.Contains(string(red), `"user_data"`)
		if !cloud && !metal {
			t.Errorf("%s: redacted workspace lost its shape:\n%s", td.Tenant.Metadata.Name, red)
		}
	}
}

// TestConfigLimits: a tenant-wide patch that makes the machine config too
// big for OCI's metadata but not for Nova's user_data fails validation for
// the OCI node group only, naming it at its file:line, and fails the render.
func TestConfigLimits(t *testing.T) {
	big := strings.Repeat("x", 26000)
	fsys := fstest.MapFS{"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
  configPatches:
    - name: big-file
      patch: |
        machine:
          files:
            - path: /var/big
              op: create
              permissions: 0o644
              content: ` + big + `
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: on-openstack
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: openstack
  providerConfig: {cloud: c, flavor: f, image: i, networks: [{name: n}]}
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: on-oci
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: oci
  providerConfig:
    profile: DEFAULT
    compartmentId: ocid1.compartment.oc1..aaaa
    availabilityDomain: AD-1
    shape: VM.Standard2.1
    image: ocid1.image.oc1.r.aaaa
    subnetId: ocid1.subnet.oc1.r.aaaa
`)}}
	d, err := schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if probs := Builtin().Validate(d); len(probs) != 0 {
		t.Fatalf("providerConfig problems: %v", probs)
	}
	probs := ValidateTalos(d.Tenants[0])
	if len(probs) != 1 || probs[0].File != "t.yaml" || probs[0].Line != 31 || !strings.Contains(probs[0].Message, "node group on-oci") {
		t.Fatalf("problems = %v, want one for node group on-oci at t.yaml:31", probs)
	}
	if _, err := Builtin().Render(d.Tenants[0], testSecrets(t)); err == nil || !strings.Contains(err.Error(), "on-oci") {
		t.Fatalf("render: err = %v, want the OCI node group's limit", err)
	}
	// Twice the patch is too much for Nova as well.
	fsys["t.yaml"].Data = []byte(strings.Replace(string(fsys["t.yaml"].Data), big, big+big, 1))
	d, _ = schema.Load(fsys, ".", nil)
	probs = ValidateTalos(d.Tenants[0])
	if all := fmt.Sprint(probs); len(probs) != 2 || !strings.Contains(all, "t.yaml:19:1: node group on-openstack") || !strings.Contains(all, "Nova's limit") {
		t.Fatalf("problems = %v, want the OpenStack node group at t.yaml:19 too", probs)
	}
}

// TestSimKubernetesAPINeedsLoopbackEndpoint: a sim node group with
// kubernetesAPI is refused, at its line and naming the tenant's endpoint
// and where it is declared, unless that endpoint is a loopback IPv4
// address; the simulated cloud serves a Kubernetes API nowhere else. The
// node group's resource asks for it.
func TestSimKubernetesAPINeedsLoopbackEndpoint(t *testing.T) {
	manifests := func(endpoint string) fstest.MapFS {
		return fstest.MapFS{"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: ` + endpoint + `
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: controlplane
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: controlplane
spec:
  count: 1
  providerClass: sim
  providerConfig:
    kubernetesAPI: true
`)}}
	}
	for endpoint, want := range map[string]string{
		"https://acme.example.internal:6443": "t.yaml:21:1: /spec/providerConfig/kubernetesAPI: sim providerConfig.kubernetesAPI needs a controlPlaneEndpoint at a loopback IPv4 address, the only place the simulated cloud serves a Kubernetes API: tenant acme's is https://acme.example.internal:6443 (t.yaml:8); use one such as https://127.250.0.1:6443",
		"https://[::1]:6443":                 "tenant acme's is https://[::1]:6443 (t.yaml:8)",
		"https://127.250.0.1:6443":           "",
	} {
		d, err := schema.Load(manifests(endpoint), ".", nil)
		if err != nil {
			t.Fatal(err)
		}
		probs := Builtin().Validate(d)
		switch {
		case want == "" && len(probs) != 0:
			t.Errorf("%s: %v, want no problem", endpoint, probs)
		case want == "":
			ws, err := Builtin().Render(d.Tenants[0], testSecrets(t))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(ws.Files[MainFile]), `"kubernetes_api": true`) {
				t.Errorf("the machines' resource does not ask for the Kubernetes API:\n%s", ws.Files[MainFile])
			}
		case want != "" && (len(probs) != 1 || !strings.Contains(probs[0].String(), want)):
			t.Errorf("%s: %v, want one problem with %q", endpoint, probs, want)
		}
	}
}

// TestTalosVersions: the tenant's and each node group's talosVersion may
// be any Talos up to 1.14, this build's newest contract; a newer one is
// refused at the line that declares it, as is a Kubernetes version that
// the node group's Talos does not support.
func TestTalosVersions(t *testing.T) {
	manifests := func(tenant, group string) fstest.MapFS {
		return fstest.MapFS{"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.35.0"
  talosVersion: "` + tenant + `"
  controlPlaneEndpoint: https://acme.example.internal:6443
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
  talosVersion: "` + group + `"
`)}}
	}
	for _, tc := range []struct{ tenant, group, want string }{
		{"1.12.6", "1.14.1", ""},
		{"1.14.1", "1.13.2", ""},
		{"1.12.6", "1.15.0", `t.yaml:20:1: /spec/talosVersion: talos version "1.15.0": newer than v1.14, the newest this build can render`},
		{"1.15.0", "1.14.1", `t.yaml:7:1: /spec/talosVersion: talos version "1.15.0": newer than v1.14`},
		{"1.14.1", "1.11.5", `t.yaml:20:1: /spec/talosVersion: kubernetes version "1.35.0" with talos version "1.11.5"`},
	} {
		d, err := schema.Load(manifests(tc.tenant, tc.group), ".", nil)
		if err != nil {
			t.Fatal(err)
		}
		probs := append(Builtin().Validate(d), ValidateTalos(d.Tenants[0])...)
		switch {
		case tc.want == "" && len(probs) != 0:
			t.Errorf("%s/%s: %v, want no problem", tc.tenant, tc.group, probs)
		case tc.want != "" && (len(probs) != 1 || !strings.HasPrefix(probs[0].String(), tc.want)):
			t.Errorf("%s/%s: %v, want one problem starting %q", tc.tenant, tc.group, probs, tc.want)
		}
	}
}
