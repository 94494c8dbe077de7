package render

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Patch texts that break a tenant.
const (
	// unknownField does not load: Talos's loader rejects the key.
	unknownField = "machine:\n  nosuchfield: 1\n"
	// badSubnet loads and applies; the config is invalid after it.
	badSubnet = "cluster:\n  network:\n    podSubnets: [not-a-cidr]\n"
)

// validationFleet is a fleet of n tenants of one machine in each node
// group and two ConfigPatches, whose texts all tenants share, as fleets
// do. Tenant i of broken has the text broken[i][0] in its second
// ConfigPatch, and broken[i][1], when it is not "", in its worker
// group's own spec.configPatches.
func validationFleet(n int, broken map[int][2]string) manifestfleet.Options {
	return manifestfleet.Options{Tenants: n, ControlPlanes: 1, Workers: 1, Patches: 2,
		Edit: func(t *manifestfleet.Tenant) {
			if b, ok := broken[t.Index]; ok {
				t.ConfigPatches[1].Text = b[0]
				if b[1] != "" {
					t.Groups[1].Patches = []manifestfleet.Patch{{Name: "own", Text: b[1]}}
				}
			}
		}}
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
	opts := validationFleet(n, broken)
	fleet := opts.MapFS()
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
			name := opts.Name(i)
			if _, ok := broken[i]; !ok {
				if len(got[name]) > 0 {
					t.Errorf("round %d: %s, valid, has %v", round, name, got[name])
				}
				continue
			}
			alone := fstest.MapFS{}
			for p, data := range opts.TenantFiles(i) {
				alone[p] = &fstest.MapFile{Data: data}
			}
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
		t8[1].File != "tenants/t0008/ng-workers.yaml" || t8[1].Line != 15 || !strings.Contains(t8[1].Message, "unknown keys") {
		t.Errorf("t0079: %v\nt0008: %v", last, t8)
	}
}
