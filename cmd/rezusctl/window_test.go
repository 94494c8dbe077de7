package main

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

func TestTenantStatusShowsWaitingForWindow(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := schema.TenantStatus{
		Maintenance: &schema.MaintenanceStatus{Waiting: "scale-down of workers (2 machines)",
			NextWindow: time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)},
		Conditions: schema.Conditions{{Type: schema.ConditionReconciling, Status: schema.ConditionTrue, Reason: schema.ReasonWaitingForMaintenanceWindow}},
	}
	want := "Waiting for window 2026-12-02T02:00Z (in 14h0m0s): scale-down of workers (2 machines)"
	if got := tenantStatus(st, now); got != want {
		t.Fatalf("STATUS = %q, want %q", got, want)
	}
}

// TestTenantStatusShowsRollout: while the Talos plane rolls a change
// through the machines, STATUS says which machine of how many and its
// stage, not the Ready condition's count of ready machines; during an
// upgrade of Kubernetes, the component that moves first.
func TestTenantStatusShowsRollout(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	st := schema.TenantStatus{
		Rollout: &schema.RolloutStatus{N: 4, Total: 6, Machine: "prod-cp-2", NodeGroup: "controlplane", Op: "upgrade", Stage: "restarting"},
		Conditions: schema.Conditions{{Type: schema.ConditionReady, Status: schema.ConditionFalse, Reason: schema.ReasonMachinesNotReady,
			Message: "revision 3f2a9c1e0b7d applied; 5 of 6 machines ready"}},
	}
	if got, want := tenantStatus(st, now), "Upgrading: machine 4 of 6 (prod-cp-2 restarting)"; got != want {
		t.Fatalf("STATUS = %q, want %q", got, want)
	}
	st.Rollout.Machine, st.Rollout.Op, st.Rollout.Stage = "", "", ""
	if got, want := tenantStatus(st, now), "Upgrading: machine 4 of 6 waits for its gates"; got != want {
		t.Fatalf("STATUS = %q, want %q", got, want)
	}
	st.Rollout.Kubernetes, st.Rollout.N, st.Rollout.Total = "Kubernetes 1.36.4 → 1.37.1: kube-scheduler (3 of 4)", 1, 3
	if got, want := tenantStatus(st, now), "Upgrading: Kubernetes 1.36.4 → 1.37.1: kube-scheduler (3 of 4); machine 1 of 3 waits for its gates"; got != want {
		t.Fatalf("STATUS = %q, want %q", got, want)
	}
}
