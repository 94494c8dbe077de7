package status

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestComputeKeepsUpgrading: the Upgrading condition is the Talos plane's
// (its observer writes it from the rollout record); a status computed
// after a run, as Finish computes it, keeps the tenant's and each node
// group's as they were stored, time included.
func TestComputeKeepsUpgrading(t *testing.T) {
	then := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	up := schema.Condition{Type: schema.ConditionUpgrading, Status: schema.ConditionTrue, Reason: "RollingOut",
		Message: "rolling out: 1 of 2 machines of the node group done", LastTransitionTime: then}
	cp := group("cp", schema.RoleControlPlane, 1)
	cp.Status.Conditions = schema.Conditions{up}
	w := group("w", schema.RoleWorker, 1)
	st := schema.TenantStatus{ObservedCommit: "abc", Conditions: schema.Conditions{up}}
	got := Compute(Tenant{Status: st, Generation: 2, NodeGroups: []*schema.NodeGroup{cp, w},
		Machines: []*schema.Machine{machine("cp", schema.RoleControlPlane, schema.StageUpdating), machine("w", schema.RoleWorker, schema.StageReady)}},
		then.Add(time.Minute))
	if c := cond(t, got.Tenant.Conditions, schema.ConditionUpgrading); c != up {
		t.Errorf("tenant's Upgrading: %+v, want %+v", c, up)
	}
	if c := cond(t, got.NodeGroups["cp"].Conditions, schema.ConditionUpgrading); c != up {
		t.Errorf("node group's Upgrading: %+v, want %+v", c, up)
	}
	if c := got.NodeGroups["w"].Conditions.Get(schema.ConditionUpgrading); c != nil {
		t.Errorf("a node group without one got an Upgrading condition: %+v", c)
	}
}
