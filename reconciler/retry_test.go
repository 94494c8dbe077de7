package reconciler

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// fastRetries gives a rig retries that come quickly.
func fastRetries(base, max time.Duration) func(*Options) {
	return func(o *Options) { o.RetryBase, o.RetryMax = base, max }
}

func (r *rig) unlockState(tenant, id string) {
	r.t.Helper()
	req, err := http.NewRequest("UNLOCK", r.srv.URL()+"/tfstate/"+tenant, strings.NewReader(`{"ID":"`+id+`"}`))
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("UNLOCK %s: %s", tenant, resp.Status)
	}
}

func (r *rig) tenant(name string) schema.Tenant {
	r.t.Helper()
	var t schema.Tenant
	if err := r.srv.Store().View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, name, &t) }); err != nil {
		r.t.Fatal(err)
	}
	return t
}

func (r *rig) storedCommit(rev string) schema.Commit {
	r.t.Helper()
	var c schema.Commit
	if err := r.srv.Store().View(func(tx store.Tx) error { return tx.GetObject(schema.KindCommit, rev, &c) }); err != nil {
		r.t.Fatal(err)
	}
	return c
}

// waitUntil polls cond for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withStagingWorkers returns the examples with staging's workers at n.
func withStagingWorkers(t *testing.T, n string) fstest.MapFS {
	fsys := examples(t)
	f := "staging/nodegroups.yaml"
	head, workers, ok := strings.Cut(string(fsys[f].Data), "name: workers")
	fsys[f].Data = []byte(head + "name: workers" + strings.Replace(workers, "count: 1\n", "count: "+n+"\n", 1))
	if !ok || string(fsys[f].Data) == string(examples(t)[f].Data) {
		t.Fatalf("%s: the workers' count is not where the test expects it:\n%s", f, fsys[f].Data)
	}
	return fsys
}

func condOf(t *testing.T, cs schema.Conditions, typ string) schema.Condition {
	t.Helper()
	c := cs.Get(typ)
	if c == nil {
		t.Fatalf("no condition %s in %+v", typ, cs)
	}
	return *c
}

// TestRetryAfterLockReleased: a tenant whose state someone else has locked
// fails, retried with backoff, and its status shows the retry and its next
// time; once the lock is released it applies by itself, with no new
// commit, and the retry is cleared.
func TestRetryAfterLockReleased(t *testing.T) {
	m := metrics.New()
	r := newRigWith(t, func(o *Options) {
		fastRetries(300*time.Millisecond, 2*time.Second)(o)
		o.Metrics = m
	})
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	applied := r.tenant("staging")
	stalledSince := condOf(t, applied.Status.Conditions, schema.ConditionStalled).LastTransitionTime
	if c := condOf(t, applied.Status.Conditions, schema.ConditionReconciling); c.Status != schema.ConditionFalse || c.Reason != schema.ReasonApplied {
		t.Fatalf("after the first apply: Reconciling %+v", c)
	}

	r.lockState("staging", "held-elsewhere")
	c := r.reconcile("rev2", "scale staging", withStagingWorkers(t, "2"))
	tr := resultOf(t, c, "staging")
	if tr.Phase != schema.CommitFailed || tr.Reason != schema.ReasonStateLocked || tr.Stalled || tr.NextAttemptAt.IsZero() {
		t.Fatalf("staging under someone else's lock: %s reason %q stalled %v next %v: %s", tr.Phase, tr.Reason, tr.Stalled, tr.NextAttemptAt, tr.Error)
	}
	if got := condOf(t, c.Status.Conditions, schema.ConditionReconciling); got.Status != schema.ConditionTrue || got.Reason != schema.ReasonRetryScheduled {
		t.Errorf("commit Reconciling %+v, want True RetryScheduled", got)
	}
	st := r.tenant("staging").Status
	if st.Retry == nil || st.Retry.Attempts < 1 || st.Retry.LastReason != schema.ReasonStateLocked || st.Retry.NextAttemptAt.IsZero() {
		t.Fatalf("staging's retry: %+v", st.Retry)
	}
	if got := condOf(t, st.Conditions, schema.ConditionReady); got.Status != schema.ConditionFalse || got.Reason != schema.ReasonStateLocked {
		t.Errorf("staging Ready %+v, want False StateLocked", got)
	}
	if got := condOf(t, st.Conditions, schema.ConditionReconciling); got.Status != schema.ConditionTrue || got.Reason != schema.ReasonRetryScheduled {
		t.Errorf("staging Reconciling %+v, want True RetryScheduled", got)
	}
	if got := condOf(t, st.Conditions, schema.ConditionStalled); got.Status != schema.ConditionFalse {
		t.Errorf("staging Stalled %+v, want False", got)
	}

	// While the lock is held, each retry fails again, later each time.
	first := *st.Retry
	waitUntil(t, "a second attempt", func() bool { rt := r.tenant("staging").Status.Retry; return rt != nil && rt.Attempts > first.Attempts })
	second := *r.tenant("staging").Status.Retry
	if !second.NextAttemptAt.After(first.NextAttemptAt) {
		t.Errorf("the second retry is due at %v, not after the first's %v", second.NextAttemptAt, first.NextAttemptAt)
	}
	// The retry is counted once it is queued, just after its status is
	// written: wait for the count too.
	retries := func() float64 {
		var counted dto.Metric
		if err := m.TenantRetries.WithLabelValues("staging", schema.ReasonStateLocked).Write(&counted); err != nil {
			t.Fatal(err)
		}
		return counted.GetCounter().GetValue()
	}
	waitUntil(t, "rezuscloud_tenant_retries_total{tenant=staging} to count two retries", func() bool { return retries() >= 2 })

	r.unlockState("staging", "held-elsewhere")
	waitUntil(t, "staging applies by itself", func() bool { return countBy(r.machines(), "staging", "") == 3 })
	waitUntil(t, "the commit's record is amended", func() bool { return r.storedCommit("rev2").Status.Phase == schema.CommitSucceeded })
	after := r.tenant("staging")
	if after.Status.Retry != nil || after.Status.Message != "" || after.Status.ObservedCommit != "rev2" {
		t.Errorf("after the retry succeeded: retry %+v message %q observed %q", after.Status.Retry, after.Status.Message, after.Status.ObservedCommit)
	}
	if got := condOf(t, after.Status.Conditions, schema.ConditionReconciling); got.Status != schema.ConditionFalse || got.Reason != schema.ReasonApplied {
		t.Errorf("after recovery: Reconciling %+v, want False Applied", got)
	}
	if got := condOf(t, after.Status.Conditions, schema.ConditionStalled); !got.LastTransitionTime.Equal(stalledSince) {
		t.Errorf("Stalled was never True, yet its lastTransitionTime moved from %v to %v", stalledSince, got.LastTransitionTime)
	}
	if got := condOf(t, after.Status.Conditions, schema.ConditionReady); got.Reason == schema.ReasonStateLocked || got.ObservedGeneration != after.Metadata.Generation || after.Metadata.Generation != applied.Metadata.Generation+1 {
		t.Errorf("after recovery: Ready %+v, generation %d (was %d)", got, after.Metadata.Generation, applied.Metadata.Generation)
	}
	rec := r.storedCommit("rev2")
	if tr := resultOf(t, &rec, "staging"); tr.Phase != schema.CommitSucceeded || tr.Plan.Add != 1 || !tr.NextAttemptAt.IsZero() {
		t.Errorf("rev2's staging result after the retry: %+v", tr)
	}
	if got := condOf(t, rec.Status.Conditions, schema.ConditionReady); got.Status != schema.ConditionTrue {
		t.Errorf("rev2 Ready %+v after the retry", got)
	}
}

// TestRetryCloudFailsOnce: a cloud API that fails once and then works: the
// tenant's run fails, is retried and succeeds, with no new commit.
func TestRetryCloudFailsOnce(t *testing.T) {
	r := newRigWith(t, fastRetries(200*time.Millisecond, time.Second))
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	st, err := sim.Open(r.simDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.FailNext(1); err != nil {
		t.Fatal(err)
	}
	c := r.reconcile("rev2", "scale staging", withStagingWorkers(t, "2"))
	tr := resultOf(t, c, "staging")
	if tr.Phase != schema.CommitFailed || tr.Reason != schema.ReasonTofuFailed || !strings.Contains(tr.Error, "simulated cloud failed") {
		t.Fatalf("staging with a failing cloud: %s %q: %s", tr.Phase, tr.Reason, tr.Error)
	}
	waitUntil(t, "staging applies by itself", func() bool { return countBy(r.machines(), "staging", "") == 3 })
	waitUntil(t, "rev2 succeeds", func() bool { return r.storedCommit("rev2").Status.Phase == schema.CommitSucceeded })
	if rt := r.tenant("staging").Status.Retry; rt != nil {
		t.Errorf("retry after the success: %+v", rt)
	}
}

// TestStalledNeverRetried: a tenant that only a new commit can help (here:
// the deletion guard holds back its destruction) stalls, and nothing runs
// it again however long one waits.
func TestStalledNeverRetried(t *testing.T) {
	r := newRigWith(t, fastRetries(50*time.Millisecond, 100*time.Millisecond))
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	runs := r.rec.Runner().Runs()
	c := r.reconcile("rev2", "remove all", fstest.MapFS{"README.md": {Data: []byte("nothing here")}})
	if got := condOf(t, c.Status.Conditions, schema.ConditionStalled); c.Status.Phase != schema.CommitFailed || got.Status != schema.ConditionTrue {
		t.Fatalf("commit removing every tenant: %s, Stalled %+v", c.Status.Phase, got)
	}
	for _, tr := range c.Status.Tenants {
		if !tr.Stalled || tr.Reason != schema.ReasonDeletionBlocked || !tr.NextAttemptAt.IsZero() {
			t.Errorf("%s: %+v, want stalled by the deletion guard with no retry", tr.Tenant, tr)
		}
	}
	time.Sleep(time.Second) // ten times the backoff's cap
	if got := r.rec.Runner().Runs(); got != runs {
		t.Errorf("a stalled commit ran tofu %d times", got-runs)
	}
	if d := r.rec.Queue().Depth(); d != 0 {
		t.Errorf("%d runs queued for stalled tenants", d)
	}
	for _, name := range []string{"production", "staging"} {
		st := r.tenant(name).Status
		got := condOf(t, st.Conditions, schema.ConditionStalled)
		if got.Status != schema.ConditionTrue || got.Reason != schema.ReasonDeletionBlocked || st.Retry != nil {
			t.Errorf("%s: Stalled %+v retry %+v", name, got, st.Retry)
		}
		if ready := condOf(t, st.Conditions, schema.ConditionReady); ready.Status != schema.ConditionFalse || ready.Reason != schema.ReasonDeletionBlocked {
			t.Errorf("%s: Ready %+v", name, ready)
		}
	}
	// A new commit mends it: the tenants are back, and no longer stalled.
	mustSucceed(t, r.reconcile("rev3", "restore", examples(t)))
	if got := condOf(t, r.tenant("staging").Status.Conditions, schema.ConditionStalled); got.Status != schema.ConditionFalse {
		t.Errorf("after the restoring commit: Stalled %+v", got)
	}
}

// TestNewCommitSupersedesRetry: a new revision for a tenant that waits for
// its retry runs at once and takes the retry's place.
func TestNewCommitSupersedesRetry(t *testing.T) {
	r := newRigWith(t, fastRetries(time.Hour, time.Hour))
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	r.lockState("staging", "held-elsewhere")
	c := r.reconcile("rev2", "scale staging", withStagingWorkers(t, "2"))
	if tr := resultOf(t, c, "staging"); tr.NextAttemptAt.IsZero() || r.rec.Queue().Depth() != 1 {
		t.Fatalf("staging %+v, %d queued: want a retry waiting", tr, r.rec.Queue().Depth())
	}
	r.unlockState("staging", "held-elsewhere")
	start := time.Now()
	mustSucceed(t, r.reconcile("rev3", "scale staging more", withStagingWorkers(t, "3")))
	if d := time.Since(start); d > 5*time.Minute {
		t.Fatalf("the new commit took %v: it waited for the backoff", d)
	}
	if got := countBy(r.machines(), "staging", ""); got != 4 {
		t.Errorf("staging has %d machines, want 4", got)
	}
	if d := r.rec.Queue().Depth(); d != 0 {
		t.Errorf("%d runs still queued: the retry was not superseded", d)
	}
	old := r.storedCommit("rev2")
	if tr := resultOf(t, &old, "staging"); tr.Phase != schema.CommitFailed || !tr.NextAttemptAt.IsZero() {
		t.Errorf("rev2's staging result %+v, want failed with its retry gone", tr)
	}
	if got := condOf(t, old.Status.Conditions, schema.ConditionReconciling); got.Status != schema.ConditionFalse {
		t.Errorf("rev2 Reconciling %+v after its retry was superseded", got)
	}
	if st := r.tenant("staging").Status; st.Retry != nil || st.ObservedCommit != "rev3" {
		t.Errorf("staging after rev3: retry %+v observed %s", st.Retry, st.ObservedCommit)
	}
}

// TestStepErrorsSteer: a step added to applySteps steers the run by the
// error it returns: a StalledError ends the tenant's runs until a new
// commit, a RetryError has the tenant run again by itself.
func TestStepErrorsSteer(t *testing.T) {
	r := newRigWith(t, fastRetries(100*time.Millisecond, 200*time.Millisecond))
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	var calls atomic.Int32
	var fail func(n int32) error
	saved := applySteps
	t.Cleanup(func() { applySteps = saved })
	// The injected step runs right before Finish records the run.
	finish := slices.IndexFunc(saved, func(s step[*tenantRun]) bool { return s.name == "Finish" })
	applySteps = append(slices.Clone(saved[:finish]), step[*tenantRun]{"Inject", func(t *tenantRun, _ context.Context) (stepResult, error) {
		if t.name != "staging" {
			return stepNext, nil
		}
		return stepNext, fail(calls.Add(1))
	}})
	applySteps = append(applySteps, saved[finish:]...)

	fail = func(int32) error {
		return stall(schema.ReasonInvalidManifests, errors.New("injected: only a new commit helps"))
	}
	c := r.reconcile("rev2", "scale staging", withStagingWorkers(t, "2"))
	if tr := resultOf(t, c, "staging"); !tr.Stalled || !tr.NextAttemptAt.IsZero() {
		t.Fatalf("stalled step: %+v", tr)
	}
	time.Sleep(time.Second)
	if n := calls.Load(); n != 1 {
		t.Fatalf("a stalled tenant ran %d times, want once", n)
	}

	calls.Store(0)
	fail = func(n int32) error {
		if n == 1 {
			return retry(schema.ReasonTofuFailed, errors.New("injected: passes by itself"))
		}
		return nil
	}
	c = r.reconcile("rev3", "scale staging more", withStagingWorkers(t, "3"))
	if tr := resultOf(t, c, "staging"); tr.Stalled || tr.NextAttemptAt.IsZero() {
		t.Fatalf("retried step: %+v", tr)
	}
	waitUntil(t, "rev3 succeeds by its retry", func() bool { return r.storedCommit("rev3").Status.Phase == schema.CommitSucceeded })
	if n := calls.Load(); n != 2 {
		t.Errorf("the retried tenant ran %d times, want twice", n)
	}
}
