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
Plan: 2 to add, 0 to change, 3 to destroy.
`

func TestPlanLineFindsReplacedAndDestroyedResources(t *testing.T) {
	p := &planLine{}
	// Written in pieces, as a pipe delivers it.
	for i := 0; i < len(planOutput); i += 7 {
		p.Write([]byte(planOutput[i:min(i+7, len(planOutput))]))
	}
	got := p.goneResources()
	want := []PlannedChange{
		{Address: "rezussim_machine.ng_cp[0]", Actions: []string{"delete", "create"}},
		{Address: "rezussim_machine.ng_cp[1]", Actions: []string{"delete"}},
		{Address: "rezussim_machine.ng_workers[0]", Actions: []string{"delete", "create"}},
	}
	if !slices.EqualFunc(got, want, func(a, b PlannedChange) bool { return a.Address == b.Address && slices.Equal(a.Actions, b.Actions) }) {
		t.Fatalf("gone resources %+v, want %+v", got, want)
	}
	if sum, ok := p.summary(); !ok || sum.Destroy != 3 {
		t.Fatalf("summary %+v %v", sum, ok)
	}
}
