package events

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
)

// retrying is the outcome of a run of revision rev that failed for the
// attempt-th time in a row.
func retrying(attempt int, msg string, next time.Time, gen int64) status.Outcome {
	return status.Retrying(schema.ReasonTofuFailed, msg, schema.RetryStatus{Attempts: attempt, NextAttemptAt: next,
		LastReason: schema.ReasonTofuFailed}, gen)
}

// TestReconcileFailedAndRecovered: each failed run of a tenant is told,
// with the tenant's labels, the revision it attempted and its subject, a
// link to its page and no secret; the success after them is told once as
// Recovered, also by a deriver that started after the failures.
func TestReconcileFailedAndRecovered(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	expect(t, r.events())

	r.putCommit(commit(revB, "Scale the workers\n\nTo three.", r.clock.Now(), schema.CommitApplying,
		schema.TenantResult{Tenant: "alpha", Phase: schema.CommitPending}))
	r.outcome(status.Applying(revB, 2), 2)
	key := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIGZ6bWh0b2tlbmF0ZXN0a2V5bWF0ZXJpYWwxMjM0NTY3\n-----END PRIVATE KEY-----"
	r.outcome(retrying(1, "tofu apply: the cloud answered 500 while it held "+key, t0.Add(time.Minute), 2), 2)
	evs := r.events()
	expect(t, evs, notify.ReconcileFailed)
	ev := evs[0]
	want := notify.Event{Reason: notify.ReconcileFailed, Severity: notify.SeverityError, Tenant: "alpha",
		Commit: notify.Commit{SHA: revB, Subject: "Scale the workers"}, URL: "https://rezus.example/tenants/alpha", Time: t0}
	if ev.Reason != want.Reason || ev.Severity != want.Severity || ev.Tenant != want.Tenant || ev.Commit != want.Commit ||
		ev.URL != want.URL || !ev.Time.Equal(want.Time) || ev.Labels["env"] != "prod" || ev.Machine != "" {
		t.Fatalf("event:\n%s\nwant %+v with label env=prod", describe(evs), want)
	}
	for _, s := range []string{"TofuFailed", "attempt 1", "2026-12-02T09:01:00Z", "the cloud answered 500"} {
		if !strings.Contains(ev.Message, s) {
			t.Errorf("message %q lacks %q", ev.Message, s)
		}
	}
	if strings.Contains(ev.Message, "MC4CAQAw") || strings.Contains(ev.Message, "PRIVATE KEY") {
		t.Errorf("message %q holds the key", ev.Message)
	}

	// The retry's run is in progress: nothing to tell. It fails again.
	r.outcome(status.Applying(revB, 2), 2)
	expect(t, r.events())
	r.outcome(retrying(2, "tofu apply: the cloud answered 500", t0.Add(3*time.Minute), 2), 2)
	evs = r.events()
	expect(t, evs, notify.ReconcileFailed)
	if !strings.Contains(evs[0].Message, "attempt 2") {
		t.Fatalf("second failure: %q", evs[0].Message)
	}

	// A restart tells nothing again; the success after it is Recovered.
	r.restart()
	expect(t, r.events())
	r.record(func(rec status.Recorder) error {
		return rec.Applied(status.Apply{Desired: desired(), Revision: revB, Generation: 2, Machines: alphaMachines()})
	})
	evs = r.events()
	expect(t, evs, notify.Recovered)
	if evs[0].Severity != notify.SeverityInfo || evs[0].Commit.SHA != revB || evs[0].Commit.Subject != "Scale the workers" {
		t.Fatalf("recovered:\n%s", describe(evs))
	}
	r.record(func(rec status.Recorder) error {
		return rec.Applied(status.Apply{Desired: desired(), Revision: revB, Generation: 2, Machines: alphaMachines()})
	})
	r.outcome(status.Applied(revB, 2), 2)
	expect(t, r.events())
}

// TestStalled: a tenant that stalls is told once per cause (reason and
// generation); a tenant held back by the deletion guard is not (the
// commit's CommitRefused tells of it); a new commit that applies is
// Recovered.
func TestStalled(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	r.putCommit(commit(revB, "Replace the control plane", r.clock.Now(), schema.CommitApplying,
		schema.TenantResult{Tenant: "alpha", Phase: schema.CommitPending}))
	blocked := "the plan replaces control-plane machines: add the trailer Rezuscloud-Allow-Replace: alpha"
	r.outcome(status.Stalled(schema.ReasonReplaceBlocked, blocked, 2), 2)
	evs := r.events()
	expect(t, evs, notify.Stalled)
	if !strings.Contains(evs[0].Message, "ReplaceBlocked") || !strings.Contains(evs[0].Message, "Rezuscloud-Allow-Replace") ||
		evs[0].Commit.SHA != revB || evs[0].Severity != notify.SeverityError {
		t.Fatalf("stalled:\n%s", describe(evs))
	}
	r.outcome(status.Stalled(schema.ReasonReplaceBlocked, blocked+".", 2), 2)
	expect(t, r.events())
	r.outcome(status.Stalled(schema.ReasonReplaceBlocked, blocked, 3), 3)
	expect(t, r.events(), notify.Stalled)
	r.outcome(status.Stalled(schema.ReasonDeletionBlocked, "this commit would destroy 1 tenants (alpha)", 3), 3)
	expect(t, r.events())
	r.record(func(rec status.Recorder) error {
		return rec.Applied(status.Apply{Desired: desired(), Revision: revC, Generation: 4, Machines: alphaMachines()})
	})
	expect(t, r.events(), notify.Recovered)
}

// TestRollouts: a rollout's start, its end, and its stop at a machine,
// which the run's Stalled condition and the observer's Upgrading
// condition both show, told once with the machine.
func TestRollouts(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	r.putCommit(commit(revB, "Talos 1.12.7", r.clock.Now(), schema.CommitApplying,
		schema.TenantResult{Tenant: "alpha", Phase: schema.CommitPending}))
	r.outcome(status.InPlane(revB, 2), 2)
	observe := func(p status.Rollout) {
		p.Tenant = "alpha"
		r.record(func(rec status.Recorder) error {
			_, err := rec.TenantObserved("alpha", status.Observation{Rollout: p})
			return err
		})
	}
	observe(status.Rollout{Active: true, N: 1, Total: 3, Machine: "alpha-cp-0", MachineID: "alpha-cp-0", NodeGroup: "cp", Op: "upgrade"})
	evs := r.events()
	expect(t, evs, notify.RolloutStarted)
	if evs[0].Machine != "alpha-cp-0" || evs[0].Commit.SHA != revB || !strings.Contains(evs[0].Message, "machine 1 of 3") {
		t.Fatalf("started:\n%s", describe(evs))
	}
	observe(status.Rollout{Active: true, N: 2, Total: 3, Machine: "alpha-w-0", MachineID: "alpha-w-0", NodeGroup: "w", Op: "upgrade"})
	expect(t, r.events())
	observe(status.Rollout{Total: 3})
	expect(t, r.events(), notify.RolloutSucceeded)

	observe(status.Rollout{Active: true, N: 3, Total: 3, Machine: "alpha-w-1", MachineID: "alpha-w-1", NodeGroup: "w", Op: "upgrade"})
	expect(t, r.events(), notify.RolloutStarted)
	// The stop names the machine by its TF address; the event by its
	// host name.
	stop := "tenant alpha: rollout stopped at machine rezussim_machine.cp[0] (upgrade): it came back on Talos 1.12.6 and was rolled back; the other machines were left as they are until a new commit changes the tenant"
	r.outcome(status.Stalled(schema.ReasonRolloutFailed, stop, 2), 2)
	evs = r.events()
	expect(t, evs, notify.RolloutFailed)
	if evs[0].Machine != "alpha-cp-0" || evs[0].Severity != notify.SeverityError || !strings.Contains(evs[0].Message, "rezussim_machine.cp[0]") {
		t.Fatalf("failed:\n%s", describe(evs))
	}
	observe(status.Rollout{Total: 3, Failed: &status.RolloutFailure{Machine: "rezussim_machine.cp[0]", NodeGroup: "cp", Op: "upgrade", Reason: "rolled back"}})
	expect(t, r.events())
	r.restart()
	expect(t, r.events())

	// A new commit rolls again, through the machine that stopped it.
	r.putCommit(commit(revC, "Talos 1.12.8", r.clock.Now(), schema.CommitApplying,
		schema.TenantResult{Tenant: "alpha", Phase: schema.CommitPending}))
	r.outcome(status.InPlane(revC, 3), 3)
	expect(t, r.events())
	observe(status.Rollout{Active: true, N: 1, Total: 1, Machine: "alpha-w-1", MachineID: "alpha-w-1", NodeGroup: "w", Op: "upgrade"})
	evs = r.events()
	expect(t, evs, notify.RolloutStarted)
	if evs[0].Commit.SHA != revC || evs[0].Commit.Subject != "Talos 1.12.8" {
		t.Fatalf("second rollout names %+v", evs[0].Commit)
	}
	observe(status.Rollout{Total: 1})
	r.record(func(rec status.Recorder) error {
		return rec.Applied(status.Apply{Desired: desired(), Revision: revC, Generation: 3, Machines: alphaMachines()})
	})
	expect(t, r.events(), notify.RolloutSucceeded, notify.Recovered)
}

// TestDriftAndBackups: Drifted and DriftResolved, BackupFailed and
// BackupRecovered, each told once at its change.
func TestDriftAndBackups(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	drift := func(found string) {
		r.record(func(rec status.Recorder) error {
			_, _, err := rec.Drift("alpha", status.Drift{Revision: revA, Generation: 1, Found: found})
			return err
		})
	}
	drift("rezussim_machine.w[0] changed: shape")
	evs := r.events()
	expect(t, evs, notify.Drifted)
	if !strings.Contains(evs[0].Message, "shape") || evs[0].Commit != (notify.Commit{SHA: revA, Subject: "Create alpha"}) {
		t.Fatalf("drifted:\n%s", describe(evs))
	}
	drift("rezussim_machine.w[0] changed: shape, image")
	expect(t, r.events())
	drift("")
	expect(t, r.events(), notify.DriftResolved)

	backup := func(err error) {
		r.record(func(rec status.Recorder) error {
			_, e := rec.BackedUp("alpha", status.Backup{Attempt: r.clock.Now(), Err: err, Count: -1})
			return e
		})
	}
	backup(errors.New("etcd snapshot: no leader"))
	evs = r.events()
	expect(t, evs, notify.BackupFailed)
	if !strings.Contains(evs[0].Message, "no leader") {
		t.Fatalf("backup failed: %q", evs[0].Message)
	}
	backup(errors.New("etcd snapshot: timeout"))
	expect(t, r.events())
	backup(nil)
	expect(t, r.events(), notify.BackupRecovered)
	backup(nil)
	expect(t, r.events())
}

// TestRestartTellsNothingAgain: a deriver started on a store whose
// tenants are failing, stalled, drifted, rolled back and failing their
// backups tells nothing; the next change is told as usual.
func TestRestartTellsNothingAgain(t *testing.T) {
	r := newRig(t)
	r.applied(revA, "Create alpha", 1)
	r.outcome(retrying(1, "boom", t0.Add(time.Minute), 1), 1)
	r.record(func(rec status.Recorder) error {
		_, _, err := rec.Drift("alpha", status.Drift{Revision: revA, Generation: 1, Found: "drifted"})
		return err
	})
	r.record(func(rec status.Recorder) error {
		_, err := rec.BackedUp("alpha", status.Backup{Attempt: t0, Err: errors.New("no leader"), Count: -1})
		return err
	})
	r.record(func(rec status.Recorder) error {
		_, err := rec.TenantObserved("alpha", status.Observation{Rollout: status.Rollout{Tenant: "alpha", Total: 1,
			Failed: &status.RolloutFailure{Machine: "alpha-w-0", Op: "apply", Reason: "gone"}}})
		return err
	})
	expect(t, r.events(), notify.ReconcileFailed, notify.Drifted, notify.BackupFailed, notify.RolloutFailed)
	for range 2 {
		r.restart()
		r.clock.advance(time.Hour)
		r.outcome(status.Applying(revA, 1), 1)
		expect(t, r.events())
	}
	r.outcome(retrying(2, "boom", t0.Add(time.Hour), 1), 1)
	expect(t, r.events(), notify.ReconcileFailed)
}
