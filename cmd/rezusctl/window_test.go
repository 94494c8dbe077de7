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
