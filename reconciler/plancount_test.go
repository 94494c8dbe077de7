package reconciler

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestPlanCountsMachinesApart: a plan's summary counts the machines among
// its changes, by the provider modules' TF types, apart from the other
// resources such as the Talos secrets: a new tenant of five machines is
// "machines +5, other +1", not "+6".
func TestPlanCountsMachinesApart(t *testing.T) {
	r := &Reconciler{modules: render.Builtin()}
	created, replaced := []string{"create"}, []string{"delete", "create"}
	changes := []tofu.PlannedChange{{Address: "terraform_data.talos_secrets", Actions: created}}
	for _, a := range []string{"rezussim_machine.ng_cp[0]", "rezussim_machine.ng_cp[1]", "rezussim_machine.ng_cp[2]",
		"rezussim_machine.ng_workers[0]", "rezussim_machine.ng_workers[1]"} {
		changes = append(changes, tofu.PlannedChange{Address: a, Actions: created})
	}
	sum := r.withMachines(schema.PlanSummary{Add: 6}, changes)
	if sum.Machines != (schema.PlanCounts{Add: 5}) || sum.Text() != "machines +5, other +1" {
		t.Fatalf("new tenant: %+v, %q", sum, sum.Text())
	}
	changes = []tofu.PlannedChange{
		{Address: "module.edge.openstack_compute_instance_v2.ng_w[0]", Actions: replaced},
		{Address: "openstack_networking_port_v2.ng_w[0]", Actions: []string{"update"}},
		{Address: "rezussim_machine.ng_w[3]", Actions: []string{"delete"}},
	}
	sum = r.withMachines(schema.PlanSummary{Add: 1, Change: 1, Destroy: 2}, changes)
	if sum.Machines != (schema.PlanCounts{Add: 1, Destroy: 2}) || sum.Text() != "machines +1 -2, other ~1" {
		t.Fatalf("replace and scale down: %+v, %q", sum, sum.Text())
	}
	// A bare-metal machine is a terraform_data record, as the secrets are.
	changes = []tofu.PlannedChange{
		{Address: `terraform_data.ng_workers["127.1.0.9"]`, Actions: created},
		{Address: "terraform_data.talos_secrets", Actions: created},
	}
	if sum = r.withMachines(schema.PlanSummary{Add: 2}, changes); sum.Text() != "machines +1, other +1" {
		t.Fatalf("metal: %q", sum.Text())
	}
	for addr, want := range map[string][2]string{
		"rezussim_machine.ng_cp[0]":                       {"rezussim_machine", "ng_cp"},
		`module.a["x"].module.b.rezussim_machine.ng_w[1]`: {"rezussim_machine", "ng_w"},
		"data.rezussim_image.talos":                       {"", ""},
	} {
		if typ, name := resourceOf(addr); typ != want[0] || name != want[1] {
			t.Errorf("resourceOf(%q) = %q %q, want %q", addr, typ, name, want)
		}
	}
}
