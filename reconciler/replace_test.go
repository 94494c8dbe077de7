package reconciler

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/schema"
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

func TestReplaceCheckNeedsTheTrailerForControlPlanes(t *testing.T) {
	td := &schema.TenantDesired{Tenant: &schema.Tenant{Metadata: schema.ObjectMeta{Name: "staging"}}}
	for name, role := range map[string]string{"cp": schema.RoleControlPlane, "workers": schema.RoleWorker} {
		td.NodeGroups = append(td.NodeGroups, &schema.NodeGroup{Metadata: schema.ObjectMeta{Name: name,
			Labels: map[string]string{schema.LabelTenant: "staging", schema.LabelRole: role}}})
	}
	p := &planLine{}
	p.Write([]byte(planOutput))
	gone := p.goneResources()

	err := replaceCheck(td, nil)(gone)
	var re *ReplaceError
	if !errors.As(err, &re) || !slices.Equal(re.Addresses, []string{"rezussim_machine.ng_cp[0]"}) ||
		!strings.Contains(err.Error(), `"Rezuscloud-Allow-Replace: staging"`) {
		t.Fatalf("without a trailer: %v", err)
	}
	other := commitmsg.ParseTrailers("change\n\nRezuscloud-Allow-Replace: production\n")
	if err := replaceCheck(td, other)(gone); err == nil {
		t.Fatal("a trailer naming another tenant allowed the replacement")
	}
	for _, msg := range []string{
		"change\n\nRezuscloud-Allow-Replace: staging\n",
		"change\n\nrezuscloud-allow-replace: production, staging\n",
		"change\n\nRezuscloud-Allow-Replace: production\nRezuscloud-Allow-Replace: staging\n",
	} {
		if err := replaceCheck(td, commitmsg.ParseTrailers(msg))(gone); err != nil {
			t.Errorf("%q: %v", msg, err)
		}
	}
	// Only destroyed control planes and replaced workers: no trailer needed.
	if err := replaceCheck(td, nil)(gone[1:]); err != nil {
		t.Fatalf("destroys and worker replacements: %v", err)
	}
}
