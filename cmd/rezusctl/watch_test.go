package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestWatchLinesOfARolloutDiffer: a rollout writes the tenant and its node
// groups at every step while their counts stay the same; each step's
// watch line says where the rollout is, so no two read alike.
func TestWatchLinesOfARolloutDiffer(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ready := schema.Condition{Type: schema.ConditionReady, Status: schema.ConditionTrue, Reason: schema.ReasonApplied,
		Message: "revision 3f2a9c1e0b7d applied; 6 of 6 machines ready"}
	event := func(obj any) client.Event {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var ev client.Event
		ev.Type, ev.Object = "MODIFIED", b
		if err := json.Unmarshal(b, &ev.Meta); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	tenant := func(r *schema.RolloutStatus) client.Event {
		return event(schema.Tenant{Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "production"},
			Status: schema.TenantStatus{Phase: schema.TenantActive, Machines: schema.MachineCounts{Desired: 6, Total: 6, Ready: 6},
				Rollout: r, Conditions: schema.Conditions{ready}}})
	}
	group := func(msg string) client.Event {
		up := schema.Condition{Type: schema.ConditionUpgrading, Status: schema.ConditionTrue, Reason: "RollingOut", Message: msg}
		if msg == "" {
			up.Status, up.Reason = schema.ConditionFalse, "UpToDate"
		}
		return event(schema.NodeGroup{Kind: schema.KindNodeGroup,
			Metadata: schema.ObjectMeta{Name: "workers", Labels: map[string]string{schema.LabelTenant: "production", schema.LabelRole: schema.RoleWorker}},
			Spec:     schema.NodeGroupSpec{Count: 3},
			Status: schema.NodeGroupStatus{Machines: schema.MachineCounts{Desired: 3, Total: 3, Ready: 3},
				Conditions: schema.Conditions{{Type: schema.ConditionReady, Status: schema.ConditionTrue, Message: "3 of 3 machines ready"}, up}}})
	}
	steps := []client.Event{
		tenant(&schema.RolloutStatus{N: 4, Total: 6, Machine: "production-workers-0", Op: "apply", Stage: "ready"}),
		tenant(&schema.RolloutStatus{N: 5, Total: 6}),
		tenant(&schema.RolloutStatus{N: 5, Total: 6, Machine: "production-workers-1", Op: "apply", Stage: "ready"}),
		tenant(nil),
		group("rolling out: 0 of 3 machines of the node group done; now production-workers-0 (apply)"),
		group("rolling out: 1 of 3 machines of the node group done"),
		group(""),
	}
	seen := map[string]bool{}
	for _, ev := range steps {
		line := eventLine(now, ev)
		if seen[line] {
			t.Errorf("two steps of the rollout print the same line:\n%s", line)
		}
		seen[line] = true
	}
	want := `2026-12-01T12:00:00Z  MODIFIED  Tenant       production                phase=active machines=6/6 ready=6 status="Upgrading: machine 4 of 6 (production-workers-0 ready)"`
	if got := eventLine(now, steps[0]); got != want {
		t.Errorf("line\n%s\nwant\n%s", got, want)
	}
}
