package reconciler

import (
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/schema"
)

// countingModule counts the node groups its module checks.
type countingModule struct {
	module.Module
	n *int
}

func (m countingModule) Validate(ng *schema.NodeGroup) []schema.Problem {
	*m.n++
	return m.Module.Validate(ng)
}

// TestModuleChecksOnlyChangedGroups: the provider modules check only the
// node groups a revision changed, and the problems are those of a check of
// every node group, at the same file:line.
func TestModuleChecksOnlyChangedGroups(t *testing.T) {
	fleet := manifestfleet.Options{Tenants: 3, ControlPlanes: 1, Workers: 1}
	fsys := fleet.MapFS()
	// shape gives the workers of t0001, in a file of their own, shape s.
	shape := func(s string) {
		fleet.Edit = func(t *manifestfleet.Tenant) { t.Groups[1].ProviderConfig = "shape: " + s }
		fsys["tenants/t0001/ng-workers.yaml"] = &fstest.MapFile{Data: fleet.TenantFiles(1)["tenants/t0001/ng-workers.yaml"]}
	}
	n := 0
	mods := render.Modules{}
	for k, m := range render.Builtin() {
		mods[k] = m
	}
	mods["sim"] = countingModule{mods["sim"], &n}
	cache := schema.NewCache(0)
	var mc moduleChecks
	check := func(want int, bad bool) {
		t.Helper()
		d, err := schema.Load(fsys, ".", &schema.Options{Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		before := n
		got := mc.validate(mods, d)
		if n-before != want {
			t.Errorf("%d node groups checked, want %d", n-before, want)
		}
		if all := render.Builtin().Validate(d); !reflect.DeepEqual(got, all) || (len(got) > 0) != bad {
			t.Errorf("problems %+v, want %+v", got, all)
		}
	}
	check(6, false)
	check(0, false)
	shape("enormous")
	check(1, true)
	check(1, true) // a node group with a problem is checked again
	shape("large")
	check(1, false)
	check(0, false)
}
