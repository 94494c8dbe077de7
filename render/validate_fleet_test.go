package render

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Patch texts that tenants of fleetTree share, as fleets do.
const (
	sharedPatch = "machine:\n      sysctls:\n        net.core.somaxconn: \"1024\"\n"
	// unknownField does not load: Talos's loader rejects the key.
	unknownField = "machine:\n      nosuchfield: 1\n"
	// badSubnet loads and applies; the config is invalid after it.
	badSubnet = "cluster:\n      network:\n        podSubnets: [not-a-cidr]\n"
)

// fleetTenant writes tenant i of a fleet into fsys: a Tenant, two node
// groups and two ConfigPatches, the second of them with patch text extra
// (sharedPatch by default), and in the worker group's own spec.configPatches
// the text group, when it is not "".
func fleetTenant(fsys fstest.MapFS, i int, extra, group string) {
	name := fmt.Sprintf("t%04d", i)
	dir := "tenants/" + name + "/"
	fsys[dir+"tenant.yaml"] = &fstest.MapFile{Data: fmt.Appendf(nil, `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: %[1]s
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://%[1]s.example.internal:6443
`, name)}
	for _, role := range []string{"controlplane", "worker"} {
		own := ""
		if role == "worker" && group != "" {
			own = "  configPatches:\n    - name: own\n      patch: |\n        " +
				strings.ReplaceAll(strings.TrimSuffix(group, "\n"), "\n", "\n    ") + "\n"
		}
		fsys[dir+"ng-"+role+".yaml"] = &fstest.MapFile{Data: fmt.Appendf(nil, `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: %s
  labels:
    rezuscloud.io/tenant: %s
    rezuscloud.io/role: %s
spec:
  count: 1
  providerClass: sim
%s`, role, name, role, own)}
	}
	if extra == "" {
		extra = sharedPatch
	}
	for p, text := range []string{sharedPatch, extra} {
		fsys[fmt.Sprintf("%spatch-%d.yaml", dir, p)] = &fstest.MapFile{Data: fmt.Appendf(nil, `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: patch-%d
  labels:
    rezuscloud.io/tenant: %s
spec:
  patch: |
    %s`, p, name, text)}
	}
}

// validateAll validates every tenant of d on four goroutines, as the
// reconciler does on every core, and returns each tenant's problems.
func validateAll(d *schema.Desired) map[string][]schema.Problem {
	found := make([][]schema.Problem, len(d.Tenants))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < len(d.Tenants); i += 4 {
				found[i] = ValidateTalos(d.Tenants[i])
			}
		})
	}
	wg.Wait()
	out := map[string][]schema.Problem{}
	for i, td := range d.Tenants {
		out[td.Tenant.Metadata.Name] = found[i]
	}
	return out
}

// A broken patch in the last tenant of a fleet whose tenants share their
// patch texts, and the same broken texts elsewhere in the fleet, give the
// same problems, at the same file:line, as each tenant validated alone.
func TestValidateTalosFleetSameProblemsAsAlone(t *testing.T) {
	const n = 80
	broken := map[int][2]string{ // tenant: its second ConfigPatch, its worker group's own patch
		7:     {unknownField, badSubnet},
		8:     {badSubnet, unknownField},
		n - 1: {unknownField, badSubnet},
	}
	fleet := fstest.MapFS{}
	for i := range n {
		fleetTenant(fleet, i, broken[i][0], broken[i][1])
	}
	load := func(fsys fstest.MapFS) *schema.Desired {
		t.Helper()
		d, err := schema.Load(fsys, ".", nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for round := range 2 {
		got := validateAll(load(fleet))
		for i := range n {
			name := fmt.Sprintf("t%04d", i)
			b, ok := broken[i]
			if !ok {
				if len(got[name]) > 0 {
					t.Errorf("round %d: %s, valid, has %v", round, name, got[name])
				}
				continue
			}
			alone := fstest.MapFS{}
			fleetTenant(alone, i, b[0], b[1])
			want := ValidateTalos(load(alone).Tenants[0])
			if !slices.Equal(got[name], want) {
				t.Errorf("round %d: in the fleet %s has %v, alone %v", round, name, got[name], want)
			}
		}
	}
	// Each names its own files: the patch that does not load stops a node
	// group there, the subnet patch is blamed once the config is complete.
	last := ValidateTalos(load(fleet).Tenants[n-1])
	t8 := ValidateTalos(load(fleet).Tenants[8])
	if len(last) != 2 || last[0].File != "tenants/t0079/patch-1.yaml" || last[0].Line != 8 || last[1].File != last[0].File ||
		len(t8) != 2 || t8[0].File != "tenants/t0008/patch-1.yaml" || !strings.Contains(t8[0].Message, "invalid after this patch") ||
		t8[1].File != "tenants/t0008/ng-worker.yaml" || t8[1].Line != 13 || !strings.Contains(t8[1].Message, "unknown keys") {
		t.Errorf("t0079: %v\nt0008: %v", last, t8)
	}
}
