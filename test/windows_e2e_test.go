package test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestMaintenanceWindowE2E, through the real server binary on a test
// clock: production gets a nightly window in Berlin time; a commit that
// scales its workers down and its batch group up outside the window adds
// the batch machine at once and keeps the worker; status, the API and
// rezusctl say what waits and when the window opens; with the clock moved
// into the window, the scale-down runs.
func TestMaintenanceWindowE2E(t *testing.T) {
	clock := filepath.Join(t.TempDir(), "clock")
	setClock := func(at time.Time) {
		t.Helper()
		if err := os.WriteFile(clock, []byte(at.Format(time.RFC3339)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	e := newE2E(t, e2eOptions{env: []string{"REZUSCLOUD_TEST_CLOCK_FILE=" + clock}})
	s := e.srv

	e.edit(e2eManifests+"/production/tenant.yaml", "  configPatches:\n",
		"  maintenanceWindows:\n    - schedule: \"0 2 * * *\"\n      duration: 2h\n      timeZone: Europe/Berlin\n  configPatches:\n")
	ngs := e2eManifests + "/production/nodegroups.yaml"
	e.work.Write(ngs, e.read(ngs)+`---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: batch
  labels:
    rezuscloud.io/tenant: production
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
`)
	s.waitApplied(e.push("production: a nightly maintenance window and a batch group"))
	if n := e2eCounts(s.tenantMachines("production")); n["production/workers"] != 2 || n["production/batch"] != 1 {
		t.Fatalf("production before the scale: %v", n)
	}

	e.setCount("production", "workers", 1)
	e.setCount("production", "batch", 2)
	sha := e.push("production: workers 2 -> 1, batch 1 -> 2")
	c := s.waitApplied(sha)
	// 02:00 in Berlin in December is 01:00 UTC.
	want := "scale-down of workers (1 machine) waits for the window opening 2026-12-02T01:00:00Z"
	if r := e2eResult(t, c, "production"); r.Waiting != want || r.Plan.Add != 1 || r.Plan.Destroy != 0 {
		t.Errorf("production's result: waiting %q plan %s, want %q and +1 -0", r.Waiting, r.Plan, want)
	}
	if n := e2eCounts(s.tenantMachines("production")); n["production/workers"] != 2 || n["production/batch"] != 2 {
		t.Fatalf("outside the window: %v, want the two workers kept and the second batch machine added", n)
	}
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/production", &tn)
	rc := tn.Status.Conditions.Get(schema.ConditionReconciling)
	if m := tn.Status.Maintenance; m == nil || m.Waiting != "scale-down of workers (1 machine)" ||
		!m.NextWindow.Equal(time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)) || rc == nil || rc.Reason != schema.ReasonWaitingForMaintenanceWindow || rc.Message != want {
		t.Errorf("production's status: maintenance %+v, Reconciling %+v", tn.Status.Maintenance, rc)
	}
	// rezusctl counts "in ..." from its own, real clock.
	ctl := ctlBinary{t: t, path: filepath.Join(cliBinaries(t), "rezusctl")} // the server has no tokens
	if out := ctl.run("get", "tenants", "--server", s.URL()); !regexp.MustCompile(`(?m)^production .*Waiting for window 2026-12-02T01:00Z \(in [^)]+\): scale-down of workers \(1 machine\)`).MatchString(out) {
		t.Errorf("rezusctl get tenants does not show production waiting:\n%s", out)
	}

	// The clock reaches the window; the queue's timer counts real time, so
	// the test asks for the run the timer would start.
	setClock(time.Date(2026, 12, 2, 1, 0, 30, 0, time.UTC))
	time.Sleep(100 * time.Millisecond) // the server reads the clock file every 50 ms
	if code, body := s.Request(http.MethodPost, "/api/v1/reconcile", []byte(`{"tenant":"production"}`), nil); code != http.StatusAccepted {
		t.Fatalf("POST /api/v1/reconcile: %d %s", code, body)
	}
	s.WaitFor("the scale-down in the window", func() bool {
		return e2eCounts(s.tenantMachines("production"))["production/workers"] == 1
	})
	s.WaitFor("production's status to stop waiting", func() bool {
		var tn schema.Tenant
		s.mustGet("/api/v1/tenants/production", &tn)
		return tn.Status.Maintenance == nil && !tn.Status.Conditions.IsTrue(schema.ConditionReconciling)
	})
	if n := e2eCounts(s.tenantMachines("production"))["production/batch"]; n != 2 {
		t.Errorf("batch after the window: %d machines, want 2", n)
	}
}
