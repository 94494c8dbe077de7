package status

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

func group(name, role string, count int) *schema.NodeGroup {
	return &schema.NodeGroup{Metadata: schema.ObjectMeta{Name: name, Labels: map[string]string{schema.LabelRole: role}},
		Spec: schema.NodeGroupSpec{Count: count}}
}

func machine(ng, role string, stage schema.MachineStage) *schema.Machine {
	return &schema.Machine{Spec: schema.MachineSpec{NodeGroup: ng, Role: role}, Status: schema.MachineStatus{Stage: stage}}
}

func cond(t *testing.T, cs schema.Conditions, typ string) schema.Condition {
	t.Helper()
	c := cs.Get(typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, cs)
	}
	return *c
}

func TestComputeCountsAndPhase(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ngs := []*schema.NodeGroup{group("cp", schema.RoleControlPlane, 1), group("w", schema.RoleWorker, 2)}
	applied := schema.TenantStatus{ObservedCommit: "abc"}
	for _, c := range []struct {
		name     string
		st       schema.TenantStatus
		machines []*schema.Machine
		api      bool
		phase    schema.TenantPhase
		ready    schema.ConditionStatus
		reason   string
		cpReady  bool
		apiReady bool
	}{
		{"never applied", schema.TenantStatus{}, nil, false, schema.TenantForming, schema.ConditionUnknown, schema.ReasonProgressing, false, false},
		{"missing a worker", applied, []*schema.Machine{machine("cp", "controlplane", schema.StageReady), machine("w", "worker", schema.StageReady)}, true,
			schema.TenantForming, schema.ConditionFalse, schema.ReasonMachinesNotReady, true, true},
		{"booting", applied, []*schema.Machine{machine("cp", "controlplane", schema.StageInstalling), machine("w", "worker", schema.StageReady), machine("w", "worker", schema.StageReady)}, false,
			schema.TenantForming, schema.ConditionFalse, schema.ReasonMachinesNotReady, false, false},
		{"ready", applied, []*schema.Machine{machine("cp", "controlplane", schema.StageReady), machine("w", "worker", schema.StageReady), machine("w", "worker", schema.StageReady)}, true,
			schema.TenantActive, schema.ConditionTrue, schema.ReasonApplied, true, true},
		{"one too many", applied, []*schema.Machine{machine("cp", "controlplane", schema.StageReady), machine("w", "worker", schema.StageReady), machine("w", "worker", schema.StageReady), machine("w", "worker", schema.StageReady)}, false,
			schema.TenantShrinking, schema.ConditionFalse, schema.ReasonMachinesNotReady, true, false},
		{"removing", schema.TenantStatus{ObservedCommit: "abc", Phase: schema.TenantRemoving}, nil, true,
			schema.TenantRemoving, schema.ConditionFalse, schema.ReasonDestroying, false, false},
	} {
		out := Compute(Tenant{Status: c.st, Generation: 4, NodeGroups: ngs, Machines: c.machines, APIAnswers: c.api}, now)
		st := out.Tenant
		if st.Phase != c.phase || st.ControlPlaneReady != c.cpReady || st.APIReady != c.apiReady {
			t.Errorf("%s: phase %s cpReady %v apiReady %v, want %s %v %v", c.name, st.Phase, st.ControlPlaneReady, st.APIReady, c.phase, c.cpReady, c.apiReady)
		}
		if st.Machines.Desired != 3 || st.Machines.Total != len(c.machines) {
			t.Errorf("%s: counts %+v", c.name, st.Machines)
		}
		r := cond(t, st.Conditions, schema.ConditionReady)
		if r.Status != c.ready || r.Reason != c.reason || r.ObservedGeneration != 4 || !r.LastTransitionTime.Equal(now) {
			t.Errorf("%s: Ready %+v, want %s %s at generation 4", c.name, r, c.ready, c.reason)
		}
		if (r.Status == schema.ConditionTrue) != st.Ready {
			t.Errorf("%s: Ready condition %s but ready %v", c.name, r.Status, st.Ready)
		}
	}

	// Node groups: a group is ready when every machine it asks for exists
	// and is ready.
	out := Compute(Tenant{Status: applied, NodeGroups: ngs, Machines: []*schema.Machine{
		machine("cp", "controlplane", schema.StageReady), machine("w", "worker", schema.StageReady)}}, now)
	if g := out.NodeGroups["cp"]; g.Machines.Total != 1 || cond(t, g.Conditions, schema.ConditionReady).Status != schema.ConditionTrue {
		t.Errorf("cp group %+v, want ready", g)
	}
	if g := out.NodeGroups["w"]; g.Machines.Desired != 2 || g.Machines.Ready != 1 || cond(t, g.Conditions, schema.ConditionReady).Status != schema.ConditionFalse {
		t.Errorf("w group %+v, want not ready with 1 of 2", g)
	}
}

// TestPhaseFollowsReadiness follows a tenant's phase through its first
// apply, a growth of a node group and a machine's reboot: forming turns
// active only when every machine the node groups ask for reports stage
// ready, and active turns forming when a group grows or a machine's stage
// drops below ready.
func TestPhaseFollowsReadiness(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(stages ...schema.MachineStage) []*schema.Machine {
		out := []*schema.Machine{machine("cp", schema.RoleControlPlane, stages[0])}
		for _, s := range stages[1:] {
			out = append(out, machine("w", schema.RoleWorker, s))
		}
		return out
	}
	two := []*schema.NodeGroup{group("cp", schema.RoleControlPlane, 1), group("w", schema.RoleWorker, 2)}
	three := []*schema.NodeGroup{group("cp", schema.RoleControlPlane, 1), group("w", schema.RoleWorker, 3)}
	ready, boot := schema.StageReady, schema.StageInitializing
	st := schema.TenantStatus{}
	for _, c := range []struct {
		what     string
		applied  bool
		groups   []*schema.NodeGroup
		machines []*schema.Machine
		want     schema.TenantPhase
	}{
		{"the first apply runs", false, two, nil, schema.TenantForming},
		{"applied, no machine ready", true, two, ms(boot, boot, boot), schema.TenantForming},
		{"applied, the control plane ready", true, two, ms(ready, schema.StageConfiguring, boot), schema.TenantForming},
		{"every machine ready", true, two, ms(ready, ready, ready), schema.TenantActive},
		{"a node group grew", true, three, ms(ready, ready, ready), schema.TenantForming},
		{"the new machine boots", true, three, ms(ready, ready, ready, schema.StageInstalling), schema.TenantForming},
		{"the new machine is ready", true, three, ms(ready, ready, ready, ready), schema.TenantActive},
		{"a machine reboots", true, three, ms(ready, ready, schema.StageRestarting, ready), schema.TenantForming},
		{"a machine is back", true, three, ms(ready, ready, ready, ready), schema.TenantActive},
		{"a machine is not observed", true, three, ms(ready, ready, "", ready), schema.TenantForming},
		{"a node group shrank", true, two, ms(ready, ready, ready, ready), schema.TenantShrinking},
		{"the extra machine is gone", true, two, ms(ready, ready, ready), schema.TenantActive},
	} {
		if c.applied {
			st.ObservedCommit = "abc"
		}
		st = Compute(Tenant{Status: st, NodeGroups: c.groups, Machines: c.machines}, now).Tenant
		if st.Phase != c.want {
			t.Errorf("%s: phase %s, want %s (machines %+v)", c.what, st.Phase, c.want, st.Machines)
		}
	}
}

// TestOutcomesAndTransitions follows one tenant through apply, success,
// a failure that is retried, its recovery and a stall; a condition's
// lastTransitionTime moves only when its status changes.
func TestOutcomesAndTransitions(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	ngs := []*schema.NodeGroup{group("w", schema.RoleWorker, 1)}
	ready := []*schema.Machine{machine("w", "worker", schema.StageReady)}
	var st schema.TenantStatus
	step := func(at time.Duration, o Outcome) {
		now := t0.Add(at)
		o.Record(&st, now)
		st.ObservedCommit = "rev1"
		st = Compute(Tenant{Status: st, NodeGroups: ngs, Machines: ready}, now).Tenant
	}
	want := func(what string, typ string, status schema.ConditionStatus, reason string, since time.Duration) {
		t.Helper()
		c := cond(t, st.Conditions, typ)
		if c.Status != status || c.Reason != reason || !c.LastTransitionTime.Equal(t0.Add(since)) {
			t.Errorf("%s: %s = %s %s since %v, want %s %s since %v", what, typ, c.Status, c.Reason,
				c.LastTransitionTime.Sub(t0), status, reason, since)
		}
	}

	step(0, Applying("rev1", 1))
	want("applying", schema.ConditionReconciling, schema.ConditionTrue, schema.ReasonApplying, 0)
	want("applying", schema.ConditionReady, schema.ConditionUnknown, schema.ReasonProgressing, 0)
	want("applying", schema.ConditionStalled, schema.ConditionFalse, schema.ReasonApplying, 0)

	step(time.Minute, Applied("rev1", 1))
	want("applied", schema.ConditionReady, schema.ConditionTrue, schema.ReasonApplied, time.Minute)
	want("applied", schema.ConditionReconciling, schema.ConditionFalse, schema.ReasonApplied, time.Minute)
	want("applied", schema.ConditionStalled, schema.ConditionFalse, schema.ReasonApplied, 0)

	retry := schema.RetryStatus{Attempts: 1, NextAttemptAt: t0.Add(3 * time.Minute), LastReason: schema.ReasonStateLocked}
	step(2*time.Minute, Retrying(schema.ReasonStateLocked, "the state is locked", retry, 2))
	want("retrying", schema.ConditionReady, schema.ConditionFalse, schema.ReasonStateLocked, 2*time.Minute)
	want("retrying", schema.ConditionReconciling, schema.ConditionTrue, schema.ReasonRetryScheduled, 2*time.Minute)
	want("retrying", schema.ConditionStalled, schema.ConditionFalse, schema.ReasonRetryScheduled, 0)
	if st.Retry == nil || st.Retry.Attempts != 1 || st.Message != "the state is locked" {
		t.Errorf("retrying: retry %+v message %q", st.Retry, st.Message)
	}

	// The retry's run: Ready is unknown while it runs, the failure stays
	// on record until it ends.
	step(3*time.Minute, Applying("rev2", 2))
	want("retry runs", schema.ConditionReady, schema.ConditionUnknown, schema.ReasonProgressing, 3*time.Minute)
	want("retry runs", schema.ConditionReconciling, schema.ConditionTrue, schema.ReasonApplying, 2*time.Minute)
	if st.Retry == nil || st.Message == "" {
		t.Errorf("a run in progress cleared the failure it retries: %+v %q", st.Retry, st.Message)
	}

	step(4*time.Minute, Applied("rev2", 2))
	want("recovered", schema.ConditionReady, schema.ConditionTrue, schema.ReasonApplied, 4*time.Minute)
	want("recovered", schema.ConditionReconciling, schema.ConditionFalse, schema.ReasonApplied, 4*time.Minute)
	if st.Retry != nil || st.Message != "" {
		t.Errorf("a success kept the retry %+v and message %q", st.Retry, st.Message)
	}
	if c := cond(t, st.Conditions, schema.ConditionReady); c.ObservedGeneration != 0 {
		// Compute got no generation here: Ready carries what it was given.
		t.Errorf("Ready observedGeneration %d", c.ObservedGeneration)
	}
	if c := cond(t, st.Conditions, schema.ConditionReconciling); c.ObservedGeneration != 2 {
		t.Errorf("Reconciling observedGeneration %d, want 2", c.ObservedGeneration)
	}

	step(5*time.Minute, Stalled(schema.ReasonInvalidManifests, "bad patch", 3))
	want("stalled", schema.ConditionStalled, schema.ConditionTrue, schema.ReasonInvalidManifests, 5*time.Minute)
	want("stalled", schema.ConditionReady, schema.ConditionFalse, schema.ReasonInvalidManifests, 5*time.Minute)
	want("stalled", schema.ConditionReconciling, schema.ConditionFalse, schema.ReasonInvalidManifests, 4*time.Minute)
	if st.Retry != nil || cond(t, st.Conditions, schema.ConditionStalled).Message != "bad patch" {
		t.Errorf("stalled: retry %+v conditions %+v", st.Retry, st.Conditions)
	}

	// Computing again with nothing new changes nothing, times included.
	before := append(schema.Conditions(nil), st.Conditions...)
	again := Compute(Tenant{Status: st, NodeGroups: ngs, Machines: ready}, t0.Add(time.Hour)).Tenant
	for i := range before {
		if before[i] != again.Conditions[i] {
			t.Errorf("recomputing changed %+v to %+v", before[i], again.Conditions[i])
		}
	}
}

func TestCommitConditions(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                string
		st                  schema.CommitStatus
		ready, rec, stalled schema.ConditionStatus
		reason              string
	}{
		{"applying", schema.CommitStatus{Phase: schema.CommitApplying}, schema.ConditionUnknown, schema.ConditionTrue, schema.ConditionFalse, schema.ReasonProgressing},
		{"succeeded", schema.CommitStatus{Phase: schema.CommitSucceeded}, schema.ConditionTrue, schema.ConditionFalse, schema.ConditionFalse, schema.ReasonSucceeded},
		{"invalid", schema.CommitStatus{Phase: schema.CommitInvalid, Message: "2 problems"}, schema.ConditionFalse, schema.ConditionFalse, schema.ConditionTrue, schema.ReasonInvalidManifests},
		{"retrying", schema.CommitStatus{Phase: schema.CommitPartiallyFailed, Tenants: []schema.TenantResult{
			{Tenant: "a", Phase: schema.CommitSucceeded}, {Tenant: "b", Phase: schema.CommitFailed, NextAttemptAt: now.Add(time.Minute)}}},
			schema.ConditionFalse, schema.ConditionTrue, schema.ConditionFalse, schema.ReasonPartiallyFailed},
		{"stalled", schema.CommitStatus{Phase: schema.CommitFailed, Tenants: []schema.TenantResult{
			{Tenant: "b", Phase: schema.CommitFailed, Stalled: true}}},
			schema.ConditionFalse, schema.ConditionFalse, schema.ConditionTrue, schema.ReasonFailed},
	} {
		st := c.st
		Commit(&st, now)
		r, rec, s := cond(t, st.Conditions, schema.ConditionReady), cond(t, st.Conditions, schema.ConditionReconciling), cond(t, st.Conditions, schema.ConditionStalled)
		if r.Status != c.ready || rec.Status != c.rec || s.Status != c.stalled || r.Reason != c.reason {
			t.Errorf("%s: Ready %s %s, Reconciling %s, Stalled %s; want %s %s, %s, %s", c.name, r.Status, r.Reason, rec.Status, s.Status, c.ready, c.reason, c.rec, c.stalled)
		}
	}
}

// Every commit write carries its totals, which lists read instead of
// every tenant's result.
func TestCommitTotals(t *testing.T) {
	st := schema.CommitStatus{Phase: schema.CommitPartiallyFailed, Tenants: []schema.TenantResult{
		{Tenant: "a", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 2, Change: 1}},
		{Tenant: "b", Phase: schema.CommitFailed, Plan: schema.PlanSummary{Destroy: 1}}}}
	Commit(&st, time.Now())
	want := schema.CommitTotals{Tenants: 2, Failed: 1, Plan: schema.PlanSummary{Add: 2, Change: 1, Destroy: 1}}
	if st.Totals == nil || *st.Totals != want {
		t.Fatalf("totals %+v, want %+v", st.Totals, want)
	}
}
