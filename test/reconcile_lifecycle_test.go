package test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReconcileRestartNoChange stops the server with SIGTERM and starts it
// again on the same data dir: the commit is reconciled again without a
// single tofu run, and every machine keeps its uid. The server then applies
// new commits as before, also when it comes back on another port.
func TestReconcileRestartNoChange(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	machines := e2eMachineIDs(s.machines(""))
	first, _ := s.Commit(e.first)
	var tenant schema.Tenant
	s.mustGet("/api/v1/tenants/production", &tenant)

	s.Stop()
	s.Start()
	c := s.waitApplied(e.first)
	if got := s.tofuRuns(); got != 0 {
		t.Errorf("restart with no change ran tofu %d times, want 0", got)
	}
	if c.Metadata.UID != first.Metadata.UID || c.Status.Phase != schema.CommitSucceeded {
		t.Errorf("commit after restart: uid %s phase %s, want uid %s Succeeded", c.Metadata.UID, c.Status.Phase, first.Metadata.UID)
	}
	if diff := cmp.Diff(e2eBrief(first.Status), e2eBrief(c.Status)); diff != "" {
		t.Errorf("the commit's record changed on restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(machines, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("machines changed on restart (-before +after):\n%s", diff)
	}
	var again schema.Tenant
	s.mustGet("/api/v1/tenants/production", &again)
	if again.Metadata.UID != tenant.Metadata.UID || again.Status.ObservedCommit != e.first {
		t.Errorf("tenant production after restart: uid %s observed %s, want uid %s observed %s",
			again.Metadata.UID, again.Status.ObservedCommit, tenant.Metadata.UID, e.first)
	}

	// A change after the restart applies.
	e.setCount("production", "workers", 3)
	scaled := e.push("Scale production workers to 3")
	c = s.waitApplied(scaled)
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
		t.Errorf("after restart: production plan %s, want +1", r.Plan)
	}
	e2eSameIDs(t, "after restart and scale", machines, e2eMachineIDs(s.machines("")))
	machines = e2eMachineIDs(s.machines(""))

	// Again, on a port the kernel picks: the state backend's address
	// changes under the tenants' work directories.
	old := s.Addr()
	s.Stop()
	s.NewPort()
	s.Start()
	if s.Addr() == old {
		t.Logf("the kernel gave the same port %s again", old)
	}
	s.waitApplied(scaled)
	if got := s.tofuRuns(); got != 0 {
		t.Errorf("second restart ran tofu %d times, want 0", got)
	}
	e.setCount("production", "workers", 2)
	shrunk := e.push("Scale production workers back to 2")
	c = s.waitApplied(shrunk)
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Destroy: 1, Machines: schema.PlanCounts{Destroy: 1}}) {
		t.Errorf("after restart on a new port: production plan %s, want -1", r.Plan)
	}
	after := e2eMachineIDs(s.machines(""))
	if len(after) != len(machines)-1 {
		t.Errorf("%d machines, want %d", len(after), len(machines)-1)
	}
	e2eSameIDs(t, "after the second restart", after, machines)
}

// TestReconcileRepositoryOutage stops the git daemon: the source reports
// the error and keeps counting failed polls, nothing changes and the API
// keeps serving. When the daemon is back the error clears, and commits
// pushed meanwhile and afterwards apply.
func TestReconcileRepositoryOutage(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	machines := e2eMachineIDs(s.machines(""))
	runs := s.tofuRuns()
	errs := s.status().Source.Errors
	if errs != 0 {
		t.Errorf("source errors %d before the outage, want 0", errs)
	}

	e.daemon.Stop()
	s.WaitFor("the source to fail twice", func() bool {
		st := s.status().Source
		return st.LastError != "" && st.Errors >= errs+2
	})
	st := s.status()
	t.Logf("source during the outage: errors %d, last error %q", st.Source.Errors, st.Source.LastError)
	if st.Source.Failures < 2 {
		t.Errorf("source failures in a row %d, want at least 2", st.Source.Failures)
	}
	if *st.Reconciler.TofuRuns != runs || st.Reconciler.LastAppliedCommit != e.first {
		t.Errorf("reconciler %+v during the outage: want %d tofu runs and %s applied", st.Reconciler, runs, e.first)
	}
	if diff := cmp.Diff(machines, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("machines changed during the outage (-before +after):\n%s", diff)
	}
	for _, path := range []string{"/healthz", "/api/v1/tenants/production", "/api/v1/commits/" + e.first} {
		if code := s.Get(path, nil); code != http.StatusOK {
			t.Errorf("GET %s during the outage: %d, want 200", path, code)
		}
	}

	// A commit lands in the repository while the daemon is down.
	e.setCount("production", "workers", 3)
	during := e.work.Commit("Scale production workers to 3 during the outage")
	e.work.Run("push", "--quiet", e.daemon.Path("repo.git"), "HEAD:refs/heads/main")

	e.daemon.Start()
	s.WaitFor("the source to recover", func() bool {
		return s.status().Source.LastError == ""
	})
	c := s.waitApplied(during)
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
		t.Errorf("commit pushed during the outage: production plan %s, want +1", r.Plan)
	}
	if st := s.status().Source; st.Failures != 0 || st.Errors < errs+2 {
		t.Errorf("source after recovery: failures %d errors %d: want 0 in a row and the errors still counted", st.Failures, st.Errors)
	}

	e.setCount("production", "workers", 4)
	after := e.push("Scale production workers to 4 after the outage")
	c = s.waitApplied(after)
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
		t.Errorf("commit after the outage: production plan %s, want +1", r.Plan)
	}
	e2eSameIDs(t, "after the outage", machines, e2eMachineIDs(s.machines("")))
	if n := len(s.machines("rezuscloud.io/tenant=production,rezuscloud.io/role=worker")); n != 4 {
		t.Errorf("%d production workers, want 4", n)
	}
}

// TestReconcileForcePush pushes A (2 workers), then B (4 workers), then
// force-pushes main back to A: A is reconciled again, marked as a
// non-fast-forward over B, and the workers are A's two again.
func TestReconcileForcePush(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	a := e.first
	atA := e2eMachineIDs(s.machines(""))

	e.setCount("production", "workers", 4)
	b := e.push("Scale production workers to 4")
	if c := s.waitApplied(b); c.Status.NonFastForward {
		t.Error("a fast-forward is marked nonFastForward")
	}
	if n := len(s.machines("rezuscloud.io/tenant=production,rezuscloud.io/role=worker")); n != 4 {
		t.Fatalf("%d workers at B, want 4", n)
	}

	e.work.Reset(a)
	e.work.ForcePush("main")
	c := s.waitApplied(a)
	if !c.Status.NonFastForward {
		t.Errorf("commit %s after the force push: nonFastForward false, want true", a[:12])
	}
	if an := c.Status.Ancestry; an == nil || an.LastApplied != b || an.Refused {
		t.Errorf("commit %s after the force push: ancestry %+v, want it applied over %s", a[:12], an, b[:12])
	}
	if c.Status.Phase != schema.CommitSucceeded {
		t.Errorf("commit %s after the force push: phase %s", a[:12], c.Status.Phase)
	}
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Destroy: 2, Machines: schema.PlanCounts{Destroy: 2}}) {
		t.Errorf("production plan %s after the force push, want -2", r.Plan)
	}
	if diff := cmp.Diff(atA, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("machines after going back to A differ from A's (-A +now):\n%s", diff)
	}
	if st := s.status(); st.Reconciler.LastCommit != a || st.Source.Revision != a {
		t.Errorf("status after the force push: reconciler %+v, source revision %s: want %s", st.Reconciler, st.Source.Revision, a)
	}
	if cb, ok := s.Commit(b); !ok || cb.Status.Phase != schema.CommitSucceeded {
		t.Errorf("commit B: found %v phase %s, want its record kept as Succeeded", ok, cb.Status.Phase)
	}
}

// TestReconcileForcePushWhileStopped force-pushes main back to an older
// commit while the server is down. After the restart the older commit is
// applied again and, as for a force push the server saw, marked as a
// non-fast-forward: the server knows which revision it reconciled last.
func TestReconcileForcePushWhileStopped(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	a := e.first
	atA := e2eMachineIDs(s.machines(""))

	e.setCount("production", "workers", 4)
	b := e.push("Scale production workers to 4")
	s.waitApplied(b)

	s.Stop()
	e.work.Reset(a)
	e.work.ForcePush("main")
	s.Start()

	c := s.waitApplied(a)
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{Destroy: 2, Machines: schema.PlanCounts{Destroy: 2}}) {
		t.Errorf("production plan %s after the force push, want -2", r.Plan)
	}
	if diff := cmp.Diff(atA, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("machines after going back to A differ from A's (-A +now):\n%s", diff)
	}
	if an := c.Status.Ancestry; !c.Status.NonFastForward || an == nil || an.LastApplied != b {
		t.Errorf("commit %s, force-pushed over %s while the server was down: nonFastForward %v, ancestry %+v; want it marked", a[:12], b[:12], c.Status.NonFastForward, an)
	}
}
