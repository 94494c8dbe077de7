package tofu

import (
	"slices"
	"testing"
)

// planOutput is tofu 1.10's human plan output for a control-plane group
// whose image changed (a replacement) and whose count went down.
const planOutput = `OpenTofu will perform the following actions:

  # rezussim_machine.ng_cp[0] must be replaced
-/+ resource "rezussim_machine" "ng_cp" {
      ~ image          = "img-a" -> "img-b" # forces replacement
        # (4 unchanged attributes hidden)
    }

  # rezussim_machine.ng_cp[1] will be destroyed
  # (because index [1] is out of range for count)
  - resource "rezussim_machine" "ng_cp" {
    }

  # rezussim_machine.ng_workers[0] must be replaced
  # rezussim_machine.ng_workers[3] will be created
  # terraform_data.talos_secrets will be updated in-place
  # rezussim_machine.ng_workers[1] is tainted, so it must be replaced
  # rezussim_machine.ng_workers[2] will be replaced due to changes in replace_triggered_by
  # data.rezussim_image.talos will be read during apply
  # rezussim_machine.ng_old[0] (deposed object 1a2b3c4d) will be destroyed
Plan: 5 to add, 1 to change, 6 to destroy.
`

// TestPlanLineFindsChangedResources: every resource line of the plan is
// read, with what becomes of the resource; the check sees those that go.
func TestPlanLineFindsChangedResources(t *testing.T) {
	p := &planLine{}
	// Written in pieces, as a pipe delivers it.
	for i := 0; i < len(planOutput); i += 7 {
		p.Write([]byte(planOutput[i:min(i+7, len(planOutput))]))
	}
	replaced, deleted := []string{"delete", "create"}, []string{"delete"}
	gone := []PlannedChange{
		{Address: "rezussim_machine.ng_cp[0]", Actions: replaced},
		{Address: "rezussim_machine.ng_cp[1]", Actions: deleted},
		{Address: "rezussim_machine.ng_workers[0]", Actions: replaced},
		{Address: "rezussim_machine.ng_workers[1]", Actions: replaced},
		{Address: "rezussim_machine.ng_workers[2]", Actions: replaced},
		{Address: "rezussim_machine.ng_old[0]", Actions: deleted},
	}
	same := func(a, b PlannedChange) bool { return a.Address == b.Address && slices.Equal(a.Actions, b.Actions) }
	if got := p.goneResources(); !slices.EqualFunc(got, gone, same) {
		t.Fatalf("gone resources %+v, want %+v", got, gone)
	}
	all := slices.Insert(slices.Clone(gone), 3,
		PlannedChange{Address: "rezussim_machine.ng_workers[3]", Actions: []string{"create"}},
		PlannedChange{Address: "terraform_data.talos_secrets", Actions: []string{"update"}})
	if got := p.planned(); !slices.EqualFunc(got, all, same) {
		t.Fatalf("planned changes %+v, want %+v", got, all)
	}
	if sum, ok := p.summary(); !ok || sum.Destroy != 6 {
		t.Fatalf("summary %+v %v", sum, ok)
	}
}
