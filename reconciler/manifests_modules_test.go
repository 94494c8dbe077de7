package reconciler

import (
	"fmt"
	"reflect"
	"testing"
	"testing/fstest"

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
	fsys := fstest.MapFS{}
	group := func(tenant, shape string) []byte {
		return fmt.Appendf(nil, "apiVersion: rezuscloud.io/v1\nkind: NodeGroup\nmetadata:\n  name: workers\n  labels:\n    rezuscloud.io/tenant: %s\n    rezuscloud.io/role: worker\nspec:\n  count: 1\n  providerClass: sim\n  providerConfig:\n    shape: %s\n", tenant, shape)
	}
	for i := range 3 {
		name := fmt.Sprintf("t%d", i)
		fsys[name+"/tenant.yaml"] = &fstest.MapFile{Data: fmt.Appendf(nil, "apiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata: {name: %s}\nspec:\n  kubernetesVersion: \"1.34.1\"\n  talosVersion: \"1.12.6\"\n  controlPlaneEndpoint: https://%s.example.internal:6443\n", name, name)}
		fsys[name+"/workers.yaml"] = &fstest.MapFile{Data: group(name, "small")}
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
	check(3, false)
	check(0, false)
	fsys["t1/workers.yaml"] = &fstest.MapFile{Data: group("t1", "enormous")}
	check(1, true)
	check(1, true) // a node group with a problem is checked again
	fsys["t1/workers.yaml"] = &fstest.MapFile{Data: group("t1", "large")}
	check(1, false)
	check(0, false)
}
