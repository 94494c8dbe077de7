package tofu

import (
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"exit status 1\n\nError: Error creating OpenStack server: got 500\n\n  with openstack_compute_instance_v2.ng_workers[1],\n  on main.tf.json line 111, in resource.x:\n 111: }\n\nError: second\n":                                  "exit status 1: Error creating OpenStack server: got 500 (with openstack_compute_instance_v2.ng_workers[1]); second",
		"exit status 1\n\nError: Cannot open machine directory\n\n  with provider[\"rezuscloud.io/rezuscloud/rezussim\"],\n  on main.tf.json line 3, in provider.rezussim:\n   3: {\n\nopen machine store: not a directory\nsecond line\n": "exit status 1: Cannot open machine directory (with provider[\"rezuscloud.io/rezuscloud/rezussim\"]): open machine store: not a directory second line",
		"exit status 1\nsomething\n  broke\n": "exit status 1: something; broke",
		"plain":                               "plain",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

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

func TestPlanLine(t *testing.T) {
	for _, c := range []struct {
		out  string
		want schema.PlanSummary
		ok   bool
	}{
		{"\nOpenTofu will perform the following actions:\n\nPlan: 1 to add, 2 to change, 3 to destroy.\n", schema.PlanSummary{Add: 1, Change: 2, Destroy: 3}, true},
		{"Plan: 2 to import, 1 to add, 0 to change, 1 to destroy.\n", schema.PlanSummary{Add: 1, Change: 0, Destroy: 1}, true},
		{"Plan: 0 to add, 0 to change, 4 to destroy, 1 to forget.\r\n", schema.PlanSummary{Add: 0, Change: 0, Destroy: 4}, true},
		{"  # x.y will be created\n  + name = \"Plan: 9 to add, 9 to change, 9 to destroy.\"\n", schema.PlanSummary{}, false},
		{"Changes to Outputs:\n  + ip = \"10.0.0.1\"\n", schema.PlanSummary{}, false},
	} {
		for _, size := range []int{1, 7, len(c.out)} {
			p := &planLine{}
			for rest := c.out; rest != ""; {
				n := min(size, len(rest))
				p.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			got, ok := p.summary()
			if got != c.want || ok != c.ok {
				t.Errorf("%q in writes of %d: %+v %v, want %+v %v", strings.TrimSpace(c.out), size, got, ok, c.want, c.ok)
			}
		}
	}
}

// planJSONOutput is what `tofu plan -json` prints of a plan that replaces
// one machine, creates one, leaves a data source to read and reports one
// resource that drifted; its last line has no newline.
const planJSONOutput = `{"@level":"info","@message":"OpenTofu 1.10.10","type":"version","tofu":"1.10.10"}
{"@level":"info","type":"resource_drift","change":{"resource":{"addr":"rezussim_machine.ng_cp[2]"},"action":"update"}}
{"@level":"info","type":"planned_change","change":{"resource":{"addr":"rezussim_machine.ng_cp[0]"},"action":"replace"}}
{"@level":"info","type":"planned_change","change":{"resource":{"addr":"rezussim_machine.ng_workers[3]"},"action":"create"}}
{"@level":"info","type":"planned_change","change":{"resource":{"addr":"data.rezussim_image.talos"},"action":"read"}}
not a JSON line
{"@level":"info","type":"change_summary","changes":{"add":2,"change":0,"import":0,"remove":1,"operation":"plan"}}`

// TestPlanJSON: the JSON lines of a plan give its planned changes (a
// replacement as delete and create, reads left out), its summary from the
// change_summary line, and whether anything drifted, however tofu's
// output is cut into writes.
func TestPlanJSON(t *testing.T) {
	for _, size := range []int{1, 13, len(planJSONOutput)} {
		p := &planJSON{}
		for rest := planJSONOutput; rest != ""; {
			n := min(size, len(rest))
			p.Write([]byte(rest[:n]))
			rest = rest[n:]
		}
		sum, changes := p.result()
		if want := (schema.PlanSummary{Add: 2, Destroy: 1}); sum != want {
			t.Errorf("writes of %d: summary %+v, want %+v", size, sum, want)
		}
		want := []PlannedChange{
			{Address: "rezussim_machine.ng_cp[0]", Actions: []string{"delete", "create"}},
			{Address: "rezussim_machine.ng_workers[3]", Actions: []string{"create"}},
		}
		if !slices.EqualFunc(changes, want, func(a, b PlannedChange) bool { return a.Address == b.Address && slices.Equal(a.Actions, b.Actions) }) {
			t.Errorf("writes of %d: changes %+v, want %+v", size, changes, want)
		}
		if !p.drift() {
			t.Errorf("writes of %d: the resource_drift line was not seen", size)
		}
	}
	quiet := &planJSON{}
	quiet.Write([]byte(`{"type":"change_summary","changes":{"add":0,"change":0,"remove":0}}` + "\n"))
	if quiet.drift() {
		t.Error("a plan without resource_drift lines drifted")
	}
}

// TestAsked: the end of tofu's output tells a plan that waits for its
// approval from a question the server has no answer to, and from output
// that only quotes a prompt.
func TestAsked(t *testing.T) {
	for _, c := range []struct {
		tail string
		want askedFor
	}{
		{"Plan: 1 to add, 0 to change, 0 to destroy.\n\nDo you want to perform these actions?\n  OpenTofu will perform the actions described above.\n  Only 'yes' will be accepted to approve.\n\n  Enter a value: ", askedApproval},
		{"Plan: 0 to add, 0 to change, 2 to destroy.\n\nDo you really want to destroy all resources?\n  OpenTofu will destroy all your managed infrastructure, as shown above.\n  There is no undo. Only 'yes' will be accepted to confirm.\n\n  Enter a value: ", askedApproval},
		{"Initializing the backend...\nvar.secret\n  Enter a value: ", askedOther},
		{"  + user_data = \"Enter a value: \"\n", askedNothing},
		{"Plan: 1 to add, 0 to change, 0 to destroy.\n", askedNothing},
	} {
		if got := asked([]byte(c.tail)); got != c.want {
			t.Errorf("asked(%q) = %v, want %v", c.tail, got, c.want)
		}
	}
	if q := question([]byte("Initializing the backend...\nvar.secret\n  Enter a value: ")); q != "var.secret   Enter a value:" {
		t.Errorf("question: %q", q)
	}
}
