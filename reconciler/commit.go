package reconciler

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

// CommitRun follows one revision through revisionSteps and the queue. Its
// Commit resource records every step, and is written even when a step
// fails. Once every tenant has a result the run is finished (Done), yet a
// tenant that is retried later amends its result.
type CommitRun struct {
	r    *Reconciler
	snap sources.Snapshot

	// What the steps found.
	applied   map[string]*appliedRecord
	desired   *schema.Desired
	hashes    map[string]string // inputHash of each desired tenant
	problems  []schema.Problem
	deletions []string
	tenants   []*schema.TenantDesired // in the order they are queued
	queued    bool
	// observe says that the store does not yet name the revision as the
	// last one received: the run's first write of its record does so too.
	observe atomic.Bool

	mu          sync.Mutex
	commit      *schema.Commit
	results     map[string]*schema.TenantResult
	outstanding int
	// retrying counts the tenants whose retry is pending.
	retrying int
	message  string
	done     chan struct{}
	// previous is the finished record of the same revision from an
	// earlier run; while set, the record is left alone.
	previous *schema.Commit
	// flush is a pending write of the record (see putSoon); finished is
	// set once the final one is done.
	flush    *time.Timer
	finished bool
	// resultsChanged is set when results holds what the commit's
	// Status.Tenants does not show yet (see syncResults).
	resultsChanged bool

	// deliver, set on the run of one tenant that the leader handed to
	// this replica (RunFor), takes the tenant's result instead of the
	// commit's record, and nil when this replica stopped before the run
	// began; retryJob is the retry the run would keep (retryLater).
	deliver  func(*RemoteResult)
	retryJob *tenantJob
}

// Submit validates a revision and queues a run for every tenant it
// touches; the runs happen in the queue's workers. The Commit resource
// records every step, and is written even when a step fails.
func (r *Reconciler) Submit(snap sources.Snapshot) *CommitRun {
	c := &schema.Commit{
		APIVersion: schema.APIVersion, Kind: schema.KindCommit,
		Metadata: schema.ObjectMeta{Name: schema.CommitName(snap.Revision)},
		Spec: schema.CommitSpec{
			SHA: snap.Revision, Ref: snap.Ref, Author: snap.Author,
			Message: snap.Message, MessageTruncated: snap.MessageTruncated,
		}.Bounded(),
	}
	c.Status.Timings.ReceivedAt = r.opts.Now()
	run := &CommitRun{r: r, commit: c, snap: snap, done: make(chan struct{}), results: map[string]*schema.TenantResult{}}
	// A revision seen before (after a restart, or a rollback to it) keeps
	// its finished record unless this run changes something.
	run.previous = r.finishedCommit(c.Metadata.Name)
	var err error
	defer func() { run.submitted(err) }()
	_, err = runSteps(context.Background(), run, revisionSteps)
	return run
}

// recordObserved notes the revision as the last one received, also in the
// store for the next start: in the same write as the run's first record
// of the commit, or on its own at the end of Submit (see observed).
func (run *CommitRun) recordObserved(context.Context) (stepResult, error) {
	r, rev := run.r, run.snap.Revision
	r.mu.Lock()
	r.lastCommit = rev
	r.runs[run.commit.Metadata.Name] = run
	r.mu.Unlock()
	run.observe.Store(r.LastObserved() != rev)
	return stepNext, nil
}

// observed returns the write that names the revision as the last one
// received, once: nil when it is done or not needed.
func (run *CommitRun) observed() func(store.Tx) error {
	if !run.observe.Swap(false) {
		return nil
	}
	rev := run.snap.Revision
	return func(tx store.Tx) error {
		_, err := tx.Put(kindObserved, "main", mustJSON(rev))
		return err
	}
}

// putObserved writes the revision as the last one received, unless a
// record of the commit did.
func (run *CommitRun) putObserved() {
	if write := run.observed(); write != nil {
		if err := run.r.store.Update(write); err != nil {
			run.r.log.Error("record observed revision", "revision", run.snap.Revision, "err", err)
		}
	}
}

// validate loads the revision and checks it as a whole: an invalid
// revision stalls, and nothing of it runs.
func (run *CommitRun) validate(context.Context) (stepResult, error) {
	r, c := run.r, run.commit
	c.Status.Phase = schema.CommitValidating
	run.put()
	applied, err := r.index.records()
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	desired, hashes, probs := r.load(run.snap, applied)
	c.Status.Timings.ValidatedAt = r.opts.Now()
	if len(probs) > 0 {
		run.problems = probs
		return stepNext, stall(schema.ReasonInvalidManifests,
			fmt.Errorf("%d problems: nothing was applied; the last good commit stays in effect", len(probs)))
	}
	run.applied, run.desired, run.hashes = applied, desired, hashes
	warnUnpinnedMetal(r.log, run.snap.Revision, desired)
	return stepNext, nil
}

// guardDeletions works out which tenants the revision removes, and holds
// back those it may not: tenants with deletion protection, and every one
// of them when they are more than Options.MaxDeletions (or all tenants)
// and the commit's trailer does not allow as many. Those stall; the rest
// of the revision goes on.
func (run *CommitRun) guardDeletions(context.Context) (stepResult, error) {
	r := run.r
	want := map[string]bool{}
	for _, td := range run.desired.Tenants {
		want[td.Tenant.Metadata.Name] = true
	}
	var gone []string
	for name := range run.applied {
		if !want[name] {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	var kept []string // suspended: their removal waits (see suspend.go)
	for _, name := range gone {
		if run.r.suspended(name) {
			run.holdSuspended(name)
			kept = append(kept, name)
			continue
		}
		if run.applied[name].Annotations[AnnotationDeletionProtection] == "true" {
			run.holdBack(name, schema.ReasonDeletionProtected, fmt.Sprintf("tenant %s has deletion protection and was not destroyed: restore its manifest with annotation %s: \"false\", let that commit apply, then remove it", name, AnnotationDeletionProtection))
			continue
		}
		run.deletions = append(run.deletions, name)
	}
	n := len(run.deletions)
	if n == 0 || allowedDeletions(run.snap.Trailers) >= n {
		return stepNext, nil
	}
	all := len(run.desired.Tenants) == 0 && len(run.applied) > 0
	if n <= r.opts.MaxDeletions && !all {
		return stepNext, nil
	}
	why := fmt.Sprintf("this commit would destroy %d tenants (%s)", n, strings.Join(run.deletions, ", "))
	if all {
		why = fmt.Sprintf("this commit would destroy every tenant (%s)", strings.Join(run.deletions, ", "))
		if len(kept) > 0 {
			why = fmt.Sprintf("this commit removes every tenant from git and would destroy %d (%s; suspended, so not destroyed: %s)", n, strings.Join(run.deletions, ", "), strings.Join(kept, ", "))
		}
	}
	run.message = fmt.Sprintf("%s, more than --max-deletions=%d allows: nothing was destroyed; add the trailer \"%s: %d\" to the commit message to allow it", why, r.opts.MaxDeletions, TrailerAllowDeletions, n)
	for _, name := range run.deletions {
		run.holdBack(name, schema.ReasonDeletionBlocked, run.message)
	}
	run.deletions = nil
	return stepNext, nil
}

// holdBack records that the revision does not destroy tenant name: its
// result fails, and the tenant stalls until a new commit.
func (run *CommitRun) holdBack(name, reason, msg string) {
	run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitFailed, Error: msg, Reason: reason, Stalled: true}
	gen := run.applied[name].Generation
	if err := run.r.recordOutcome(name, nil, gen, func(schema.TenantStatus) status.Outcome {
		return status.Stalled(reason, msg, gen)
	}); err != nil {
		run.r.log.Error("record tenant status", "tenant", name, "err", err)
	}
}

// order gives quiet tenants (see unchanged.go) their result at once and
// every other tenant a pending one, and queues first the tenants whose
// manifests changed since their last apply: the others (a retry to clear,
// a run to finish) need no tofu and must not delay them.
func (run *CommitRun) order(context.Context) (stepResult, error) {
	c, r := run.commit, run.r
	c.Status.Phase = schema.CommitPlanning
	quiet, err := r.quietTenants(run.desired.Tenants, run.applied, run.hashes)
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	now := r.opts.Now()
	for _, td := range run.desired.Tenants {
		name := td.Tenant.Metadata.Name
		if quiet[name] {
			run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitSucceeded, StartedAt: now, FinishedAt: now}
			r.opts.Metrics.Reconciled("unchanged", 0)
			r.drift.rememberQuiet(name, run, td, run.hashes[name])
			continue
		}
		run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitPending}
		run.tenants = append(run.tenants, td)
	}
	for _, name := range run.deletions {
		run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitPending}
	}
	c.Status.Tenants = run.sortedResults()
	run.outstanding = len(run.tenants) + len(run.deletions)
	if run.outstanding == 0 {
		return stepDone, nil
	}
	changed := map[string]bool{}
	for _, td := range run.tenants {
		prev := run.applied[td.Tenant.Metadata.Name]
		changed[td.Tenant.Metadata.Name] = prev == nil || prev.InputHash != run.hashes[td.Tenant.Metadata.Name]
	}
	sort.SliceStable(run.tenants, func(i, j int) bool {
		return changed[run.tenants[i].Tenant.Metadata.Name] && !changed[run.tenants[j].Tenant.Metadata.Name]
	})
	return stepNext, nil
}

// enqueue records the revision as planned and queues a run per tenant.
func (run *CommitRun) enqueue(context.Context) (stepResult, error) {
	run.put()
	run.queued = true
	q := run.r.queue
	for _, td := range run.tenants {
		q.Enqueue(td.Tenant.Metadata.Name, &tenantJob{run: run, tenant: td.Tenant.Metadata.Name, desired: td, inHash: run.hashes[td.Tenant.Metadata.Name]})
	}
	for _, name := range run.deletions {
		q.Enqueue(name, &tenantJob{run: run, tenant: name})
	}
	return stepNext, nil
}

// submitted is the deferred status write of revisionSteps: the final
// record when the steps ended the run (an invalid revision, a failure, or
// nothing to do); the tenants write the rest once queued.
func (run *CommitRun) submitted(err error) {
	defer run.putObserved()
	if err == nil {
		run.recordApplied()
	}
	if err == nil && run.queued {
		return // the tenants' runs own the record now
	}
	c := run.commit
	switch {
	case err != nil && run.problems != nil:
		c.Status.Phase = schema.CommitInvalid
		c.Status.Problems = run.problems
		c.Status.Message = err.Error()
		c.Status.Timings.FinishedAt = run.r.opts.Now()
		if run.previous != nil && run.previous.Status.Phase != schema.CommitInvalid {
			run.previous = nil
		}
		run.put()
		if run.previous != nil {
			run.commit = run.previous
		}
	case err != nil:
		run.previous = nil
		c.Status.Phase = schema.CommitFailed
		c.Status.Message = err.Error()
		c.Status.Timings.FinishedAt = run.r.opts.Now()
		run.r.putCommit(c, run.observed())
	default: // nothing to queue: the final record is the only one
		run.finish()
		return
	}
	run.mu.Lock()
	run.finished = true
	run.mu.Unlock()
	run.r.forgetRun(run)
	close(run.done)
}

// progressDelay is how long a tenant's progress may wait before the
// record of a commit of up to 100 tenants shows it.
const progressDelay = 250 * time.Millisecond

// progressInterval is how long a tenant's progress may wait before the
// commit's record shows it: progressDelay per 100 tenants of the commit.
// Every write of the record carries every tenant's result, and the store
// and each watch keep or send it whole; spacing the writes by the record's
// size keeps the bytes a commit's progress costs each second the same
// whatever its size, where a write per tenant event would cost the square
// of its tenants.
func (run *CommitRun) progressInterval() time.Duration {
	return progressDelay * time.Duration(1+(len(run.results)-1)/100)
}

// putSoon records the commit within progressInterval, in one write for
// however many tenants progress meanwhile. Called with run.mu held.
func (run *CommitRun) putSoon() {
	if run.flush != nil || run.finished {
		return
	}
	run.flush = time.AfterFunc(run.progressInterval(), func() {
		run.mu.Lock()
		defer run.mu.Unlock()
		run.flush = nil
		if !run.finished {
			run.put()
		}
	})
}

// put records the commit's progress, unless it is a quiet rerun of a
// finished one. Progress records leave out the tofu output of tenants that
// did not fail: each would otherwise carry every finished tenant's output
// again, and the store and the watch history keep every record written.
// The final record, which finish writes, has all of it.
func (run *CommitRun) put() {
	if run.previous != nil {
		return
	}
	run.syncResults()
	c := *run.commit
	c.Status.Tenants = slices.Clone(c.Status.Tenants)
	for i := range c.Status.Tenants {
		if c.Status.Tenants[i].Phase != schema.CommitFailed {
			c.Status.Tenants[i].OutputTail = ""
		}
	}
	run.r.putCommit(&c, run.observed())
	run.commit.Metadata = c.Metadata
	run.commit.Status.Conditions = c.Status.Conditions
}

// Done is closed when every tenant of the revision has finished or been
// superseded.
func (run *CommitRun) Done() <-chan struct{} { return run.done }

// Commit returns a copy of the revision's Commit as it stands.
func (run *CommitRun) Commit() *schema.Commit {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.syncResults()
	c := *run.commit
	c.Status.Tenants = append([]schema.TenantResult(nil), c.Status.Tenants...)
	c.Status.Conditions = append(schema.Conditions(nil), c.Status.Conditions...)
	return &c
}

// started marks the tenant, and the commit when it is the first, as
// applying.
func (run *CommitRun) started(tenant string) {
	if run.deliver != nil {
		return
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.commit.Status.Phase == schema.CommitPlanning {
		run.commit.Status.Phase = schema.CommitApplying
		run.commit.Status.Timings.PlannedAt = run.r.opts.Now()
	}
	run.results[tenant] = &schema.TenantResult{Tenant: tenant, Phase: schema.CommitApplying, StartedAt: run.r.opts.Now()}
	run.resultsChanged = true
	run.putSoon()
}

// record stores one tenant's result; the last one finishes the commit.
// A retry's result amends the finished commit instead.
func (run *CommitRun) record(res *schema.TenantResult, retried bool) {
	if run.delivered(res) {
		return
	}
	run.mu.Lock()
	run.results[res.Tenant] = res
	if !res.NextAttemptAt.IsZero() {
		run.retrying++
	}
	if retried {
		run.retrying--
		run.amend()
		run.mu.Unlock()
		return
	}
	run.outstanding--
	if res.OutputTail != "" || res.Phase == schema.CommitFailed {
		run.previous = nil // this run changed something: its record is the one to keep
	}
	last := run.outstanding == 0
	if !last {
		run.resultsChanged = true
		run.putSoon()
	}
	run.mu.Unlock()
	if last {
		run.finish()
	}
}

// retrySuperseded records that a newer job took the place of the tenant's
// pending retry (by is nil when the queue stopped, and the record stays as
// it is for the next start).
func (run *CommitRun) retrySuperseded(tenant string, by Job) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.retrying--
	if res := run.results[tenant]; res != nil && by != nil {
		res.NextAttemptAt = time.Time{}
		run.amend()
	}
}

// syncResults brings the commit's Status.Tenants up to results, when a
// tenant's result changed since; it runs when the record is written or
// read, not at every tenant's event, which would cost the square of the
// commit's tenants. Called with run.mu held.
func (run *CommitRun) syncResults() {
	if run.resultsChanged {
		run.commit.Status.Tenants = run.sortedResults()
		run.resultsChanged = false
	}
}

func (run *CommitRun) sortedResults() []schema.TenantResult {
	names := make([]string, 0, len(run.results))
	for n := range run.results {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]schema.TenantResult, 0, len(names))
	for _, n := range names {
		out = append(out, *run.results[n])
	}
	return out
}

// finish gives the commit its final phase.
func (run *CommitRun) finish() {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.finished = true
	if run.flush != nil {
		run.flush.Stop()
		run.flush = nil
	}
	run.conclude()
	if run.previous != nil && run.previous.Status.Phase == run.commit.Status.Phase {
		// Nothing ran: the earlier record still tells what this revision did.
		run.commit = run.previous
	} else {
		run.r.putCommit(run.commit, run.observed())
	}
	run.r.forgetRun(run)
	close(run.done)
}

// amend writes the finished commit again after a retry changed a
// tenant's result, unless a newer run of the same revision has taken
// over its record. Called with run.mu held.
func (run *CommitRun) amend() {
	if !run.finished || !run.r.isCurrent(run) {
		return
	}
	run.conclude()
	run.r.putCommit(run.commit, nil)
	run.r.forgetRun(run)
}

// conclude sets the commit's phase from its tenants' results. Called with
// run.mu held.
func (run *CommitRun) conclude() {
	c := run.commit
	run.resultsChanged = true
	run.syncResults()
	failed, ok, superseded := 0, 0, 0
	for _, res := range c.Status.Tenants {
		switch res.Phase {
		case schema.CommitFailed:
			failed++
		case schema.CommitSuperseded:
			superseded++
		default:
			ok++
		}
	}
	if c.Status.Timings.PlannedAt.IsZero() {
		c.Status.Timings.PlannedAt = c.Status.Timings.ValidatedAt
	}
	c.Status.Timings.FinishedAt = run.r.opts.Now()
	switch {
	case failed == 0 && ok == 0 && superseded > 0:
		c.Status.Phase = schema.CommitSuperseded
	case failed == 0:
		c.Status.Phase = schema.CommitSucceeded
		run.r.mu.Lock()
		run.r.lastApplied = run.snap.Revision
		run.r.mu.Unlock()
	case ok == 0:
		c.Status.Phase = schema.CommitFailed
	default:
		c.Status.Phase = schema.CommitPartiallyFailed
	}
	c.Status.Message = run.message
}

// isCurrent reports whether run is the newest run of its revision.
func (r *Reconciler) isCurrent(run *CommitRun) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[run.commit.Metadata.Name] == run
}

// forgetRun drops a finished run that no retry will amend from the runs
// the reconciler tracks. Called with run.mu held, or once nothing else
// uses run.
func (r *Reconciler) forgetRun(run *CommitRun) {
	if run.retrying > 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[run.commit.Metadata.Name] == run {
		delete(r.runs, run.commit.Metadata.Name)
	}
}
