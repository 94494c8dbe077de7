package events

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
)

const revD = "dddddddddddddddddddddddddddddddddddddddd"

// TestCommitRefused: a commit refused as invalid, unsigned or over the
// deletion guard is told once, for the whole commit, linking to its page;
// a preview is never; a deriver started later does not tell again of a
// refusal that its commit's record shows again.
func TestCommitRefused(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)

	invalid := commit(revB, "Typo\n\nbody", r.clock.Now(), schema.CommitValidating)
	r.putCommit(invalid)
	expect(t, r.events())
	invalid.Status.Phase = schema.CommitInvalid
	invalid.Status.Problems = []schema.Problem{{File: "clusters/alpha/tenant.yaml", Line: 3, Path: "/spec/talosVersion", Message: "want x.y.z"},
		{File: "clusters/alpha/ng.yaml", Line: 9, Message: "unknown field"}}
	r.putCommit(invalid)
	evs := r.events()
	expect(t, evs, notify.CommitRefused)
	ev := evs[0]
	if ev.Tenant != "" || ev.Severity != notify.SeverityError || ev.Commit != (notify.Commit{SHA: revB, Subject: "Typo"}) ||
		ev.URL != "https://rezus.example/commits/"+revB {
		t.Fatalf("refused:\n%s url %s", describe(evs), ev.URL)
	}
	for _, s := range []string{"invalid", "2 problems", "clusters/alpha/tenant.yaml:3: /spec/talosVersion: want x.y.z"} {
		if !strings.Contains(ev.Message, s) {
			t.Errorf("message %q lacks %q", ev.Message, s)
		}
	}
	r.putCommit(invalid)
	expect(t, r.events())

	unsigned := commit(revC, "Unsigned change", r.clock.Now(), schema.CommitFailed)
	unsigned.Status.Signature = &schema.CommitSignature{Refused: true}
	r.putCommit(unsigned)
	evs = r.events()
	expect(t, evs, notify.CommitRefused)
	if !strings.Contains(evs[0].Message, "not signed") {
		t.Fatalf("unsigned: %q", evs[0].Message)
	}

	// The guard holds alpha back: one CommitRefused, and no Stalled.
	guard := "this commit would destroy 1 tenants (alpha), more than --max-deletions=0 allows: nothing was destroyed"
	deletes := commit(revD, "Remove alpha", r.clock.Now(), schema.CommitPlanning,
		schema.TenantResult{Tenant: "alpha", Phase: schema.CommitFailed, Reason: schema.ReasonDeletionBlocked, Error: guard, Stalled: true})
	deletes.Status.Message = guard
	r.outcome(status.Stalled(schema.ReasonDeletionBlocked, guard, 1), 1)
	r.putCommit(deletes)
	deletes.Status.Phase = schema.CommitFailed
	r.putCommit(deletes)
	evs = r.events()
	expect(t, evs, notify.CommitRefused)
	if !strings.Contains(evs[0].Message, "deletion guard") || !strings.Contains(evs[0].Message, "--max-deletions=0") {
		t.Fatalf("deletion guard: %q", evs[0].Message)
	}

	preview := commit(revB, "A pull request", r.clock.Now(), schema.CommitInvalid)
	preview.Metadata.Name, preview.Spec.Preview = schema.PreviewCommitName(revB), true
	r.putCommit(preview)
	expect(t, r.events())

	// After a restart the server submits its head again, and records its
	// refusal again.
	r.restart()
	unsigned.Status.Timings.FinishedAt = r.clock.Now().Add(time.Second)
	r.putCommit(unsigned)
	expect(t, r.events())
}

// TestBootstrapDone: a tenant's result that bootstrapped etcd is told
// once, with the machine and the commit, however often its commit's
// record is written; a later bootstrap (its control planes replaced) is
// told again.
func TestBootstrapDone(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	at := r.clock.Now()
	res := schema.TenantResult{Tenant: "alpha", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 4},
		Plane: &schema.PlaneActions{Bootstrap: "alpha-cp-0"}, StartedAt: at, FinishedAt: at.Add(time.Minute)}
	c := commit(revB, "Create beta too", at, schema.CommitApplying, res,
		schema.TenantResult{Tenant: "beta", Phase: schema.CommitApplying})
	r.putCommit(c)
	evs := r.events()
	expect(t, evs, notify.BootstrapDone)
	if evs[0].Machine != "alpha-cp-0" || evs[0].Commit != (notify.Commit{SHA: revB, Subject: "Create beta too"}) ||
		evs[0].Severity != notify.SeverityInfo || evs[0].Tenant != "alpha" || evs[0].Labels["env"] != "prod" {
		t.Fatalf("bootstrap:\n%s", describe(evs))
	}
	c.Status.Tenants[1].Phase = schema.CommitSucceeded
	c.Status.Phase = schema.CommitSucceeded
	r.putCommit(c)
	expect(t, r.events())

	res.StartedAt, res.FinishedAt = at.Add(time.Hour), at.Add(2*time.Hour)
	res.Plane.Bootstrap = "alpha-cp-3"
	r.putCommit(commit(revC, "Replace the control planes", at.Add(time.Hour), schema.CommitSucceeded, res))
	evs = r.events()
	expect(t, evs, notify.BootstrapDone)
	if evs[0].Machine != "alpha-cp-3" {
		t.Fatalf("second bootstrap on %q", evs[0].Machine)
	}
}

// TestEventsNameTheAttemptedRevision: a tenant's events name the newest
// commit whose run of it was queued, not a later commit that left it as
// it was, nor an older one whose record is written again.
func TestEventsNameTheAttemptedRevision(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	at := r.clock.Now()
	b := commit(revB, "Grow alpha", at.Add(time.Minute), schema.CommitApplying, schema.TenantResult{Tenant: "alpha", Phase: schema.CommitPending})
	r.putCommit(b)
	// revC leaves alpha as it was: its result succeeds at once.
	r.putCommit(commit(revC, "Docs", at.Add(2*time.Minute), schema.CommitSucceeded,
		schema.TenantResult{Tenant: "alpha", Phase: schema.CommitSucceeded, StartedAt: at, FinishedAt: at}))
	// revA's record is written again (a retry of another tenant).
	r.putCommit(commit(revA, "Create alpha", at, schema.CommitFailed, schema.TenantResult{Tenant: "alpha", Phase: schema.CommitFailed}))
	r.outcome(retrying(1, "boom", at.Add(time.Hour), 2), 2)
	evs := r.events()
	expect(t, evs, notify.ReconcileFailed)
	if evs[0].Commit != (notify.Commit{SHA: revB, Subject: "Grow alpha"}) {
		t.Fatalf("the failure names %+v, want revB", evs[0].Commit)
	}
}
