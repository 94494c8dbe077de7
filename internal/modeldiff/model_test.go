package modeldiff

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

func tenantDesired(workers int, shape string) *schema.TenantDesired {
	ng := &schema.NodeGroup{Metadata: schema.ObjectMeta{Name: "workers", Labels: map[string]string{schema.LabelRole: schema.RoleWorker}},
		Spec: schema.NodeGroupSpec{Count: workers, ProviderClass: "sim", ProviderConfig: map[string]any{"shape": shape}}}
	return &schema.TenantDesired{
		Tenant:     &schema.Tenant{Metadata: schema.ObjectMeta{Name: "acme"}, Spec: schema.TenantSpec{KubernetesVersion: "1.34.1", TalosVersion: "1.12.6"}},
		NodeGroups: []*schema.NodeGroup{ng},
	}
}

func TestDiff(t *testing.T) {
	before := DesiredModel(tenantDesired(2, "small"))
	if d := Diff(before, DesiredModel(tenantDesired(2, "small"))); len(d) != 0 {
		t.Fatalf("equal models differ: %+v", d)
	}
	d := Diff(before, DesiredModel(tenantDesired(3, "small")))
	if len(d) != 2 || d[0].Kind != schema.KindNodeGroup || d[0].Action != ActionUpdate ||
		len(d[0].Fields) != 1 || d[0].Fields[0].Path != "/count" || d[0].Fields[0].Old != float64(2) || d[0].Fields[0].New != float64(3) ||
		d[1].Kind != schema.KindMachine || d[1].Action != ActionCreate || d[1].Name != "workers/2" {
		t.Fatalf("scale up: %+v", d)
	}
	d = Diff(before, DesiredModel(tenantDesired(1, "large")))
	var shapes, deleted int
	for _, c := range d {
		if c.Kind == schema.KindMachine && c.Action == ActionUpdate && c.Fields[0].Path == "/shape" {
			shapes++
		}
		if c.Kind == schema.KindMachine && c.Action == ActionDelete && c.Name == "workers/1" {
			deleted++
		}
	}
	if shapes != 1 || deleted != 1 {
		t.Fatalf("shape change and scale down: %+v", d)
	}
	d = Diff(Model{}, before)
	if d[0].Kind != schema.KindTenant || d[0].Action != ActionCreate {
		t.Fatalf("new tenant: %+v", d)
	}
	d = Diff(before, Model{})
	if d[0].Kind != schema.KindTenant || d[0].Action != ActionDelete {
		t.Fatalf("removed tenant: %+v", d)
	}
}

func TestAppliedModelMatchesDesired(t *testing.T) {
	td := tenantDesired(2, "small")
	var machines []*schema.Machine
	for i := 0; i < 2; i++ {
		machines = append(machines, &schema.Machine{
			Metadata: schema.ObjectMeta{Name: "sim-" + string(rune('a'+i)), Annotations: map[string]string{AnnotationSlot: SlotKey("workers", i)}},
			Spec:     schema.MachineSpec{Role: schema.RoleWorker, Shape: "small", NodeGroup: "workers"},
		})
	}
	applied := AppliedModel(td.Tenant, td.NodeGroups, nil, machines)
	if d := Diff(applied, DesiredModel(td)); len(d) != 0 {
		t.Fatalf("applied model of what was declared differs: %+v", d)
	}
}

func TestNaturalOrder(t *testing.T) {
	if !naturalLess("workers/9", "workers/10") || naturalLess("workers/10", "workers/9") {
		t.Error("slots are not in natural order")
	}
}
