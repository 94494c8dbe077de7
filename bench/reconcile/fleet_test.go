package reconcile

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

func TestFleetLoads(t *testing.T) {
	f := Fleet{Tenants: 100}.With("t042", 3)
	d, err := schema.Load(f.MapFS(), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if probs := render.Builtin().Validate(d); len(probs) > 0 {
		t.Fatalf("provider modules reject the fleet: %v", probs)
	}
	if len(d.Tenants) != 100 {
		t.Fatalf("tenants = %d, want 100", len(d.Tenants))
	}
	machines := 0
	for _, td := range d.Tenants {
		if len(td.NodeGroups) != 2 {
			t.Fatalf("tenant %s has %d node groups, want 2", td.Tenant.Metadata.Name, len(td.NodeGroups))
		}
		for _, ng := range td.NodeGroups {
			machines += ng.Spec.Count
		}
	}
	if machines != 301 || f.Machines() != 301 {
		t.Fatalf("machines = %d loaded, %d declared; want 301", machines, f.Machines())
	}
	if got := d.Tenant("t042").NodeGroups[1].Spec.Count; got != 3 {
		t.Fatalf("t042 workers = %d, want 3", got)
	}
}

func TestFleetOfEightMachinesPerTenant(t *testing.T) {
	f := Fleet{Tenants: 3, PerTenant: 8}.WithAll(2, +1)
	d, err := schema.Load(f.MapFS(), ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if probs := render.Builtin().Validate(d); len(probs) > 0 {
		t.Fatalf("provider modules reject the fleet: %v", probs)
	}
	want := map[string][2]int{"t000": {3, 6}, "t001": {3, 6}, "t002": {3, 5}}
	for name, w := range want {
		td := d.Tenant(name)
		if td == nil || len(td.NodeGroups) != 2 {
			t.Fatalf("tenant %s: %+v", name, td)
		}
		if cp, workers := td.NodeGroups[0].Spec.Count, td.NodeGroups[1].Spec.Count; cp != w[0] || workers != w[1] {
			t.Errorf("tenant %s has %d control planes and %d workers, want %d and %d", name, cp, workers, w[0], w[1])
		}
	}
	if f.Machines() != 8+9+9 {
		t.Errorf("Machines() = %d, want 26", f.Machines())
	}
}
