package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// A tenant's runs go with the tenant to the replica that owns it
// (Options.Owners). The leader's CommitRun keeps the revision as a
// whole: the validation, the order, the queue with its retries, the
// commit's record and the drift checks. It hands each run of a tenant
// that another replica owns to that replica (a RemoteRun) and waits for
// its result; that replica's reconciler runs applySteps or destroySteps
// in its own queue, under the context of the tenant's shard (RunFor),
// and hands back the result and the retry it would schedule, which the
// leader's queue keeps. A run whose owner dies or hands the tenant over
// before it answers is sent again to the next owner, or run here once
// this replica owns the tenant. A tenant's drift checks and etcd
// backups go to its owner the same way (remotework.go).

// Owners are the replicas among which tenants are spread.
type Owners interface {
	// Acquire returns a context for work on the tenant, and done, to be
	// called once that work has stopped; ok is false when this replica
	// does not own the tenant now. The context ends when the replica
	// fences itself or hands the tenant over.
	Acquire(tenant string) (ctx context.Context, done func(), ok bool)
	// Owns reports, taking nothing, whether Acquire would succeed now.
	Owns(tenant string) bool
	// Run has the replica that owns req's tenant run it (its RunFor),
	// and returns its result. It fails when no live replica owns the
	// tenant, or the owner stopped or did not answer.
	Run(ctx context.Context, req RemoteRun) (RemoteResult, error)
	// Changed is closed at the next change of the replicas or of the
	// shards they hold.
	Changed() <-chan struct{}
}

// ErrNotOwner is RunFor's error when this replica does not own the
// tenant (any longer): the run goes to the one that does.
var ErrNotOwner = errors.New("this replica does not own the tenant")

// errOwnerStopped is RunFor's error when the replica stopped before the
// run began.
var errOwnerStopped = errors.New("the replica that owns the tenant stopped before its run began")

// RemoteRun is one run of a tenant that the leader hands to the replica
// owning it. Desired holds the tenant's decrypted values: it travels only
// between replicas, as the tenants' states do, and is never stored.
type RemoteRun struct {
	Revision string             `json:"revision"`
	Trailers commitmsg.Trailers `json:"trailers,omitempty"`
	Tenant   string             `json:"tenant"`
	// Desired is nil when the run destroys the tenant.
	Desired *schema.TenantDesired `json:"desired,omitempty"`
	// Sources are those of Desired's tenant, node groups and patches, in
	// that order, which JSON leaves out of the objects.
	Sources   []RemoteSource `json:"sources,omitempty"`
	InputHash string         `json:"inputHash,omitempty"`
	Attempt   int            `json:"attempt,omitempty"`
	Correct   bool           `json:"correct,omitempty"`
	// Preempted: a job of a newer revision waits behind this run, whose
	// drains end early (tenantJob.Preempt).
	Preempted bool `json:"preempted,omitempty"`
	// Kind is what the owner does: a run of the tenant (""), a drift
	// check (RemoteDrift) or an etcd backup (RemoteBackup).
	Kind string `json:"kind,omitempty"`
	// Wait, for a drift check, waits for the tenant's run in progress
	// rather than skip the check.
	Wait bool `json:"wait,omitempty"`
	// Reason and Keep, for a backup: why it is taken, and how many of
	// the tenant's backups stay after it (0: the owner deletes none).
	Reason string `json:"reason,omitempty"`
	Keep   int    `json:"keep,omitempty"`
}

// RemoteSource is a schema.Source as it travels.
type RemoteSource struct {
	File      string         `json:"file"`
	Line      int            `json:"line"`
	Lines     map[string]int `json:"lines,omitempty"`
	Encrypted []string       `json:"encrypted,omitempty"`
}

// RemoteResult is the owner's answer to a RemoteRun: the tenant's result
// and, when Result.NextAttemptAt is set, the attempt and kind of the
// retry that the leader's queue should keep.
type RemoteResult struct {
	Result       schema.TenantResult `json:"result"`
	RetryAttempt int                 `json:"retryAttempt,omitempty"`
	RetryCorrect bool                `json:"retryCorrect,omitempty"`
	// Error is the error of a drift check or a backup.
	Error string `json:"error,omitempty"`
	// CorrectDrift: the drift check found drift that the leader should
	// correct (the policy "correct"), with a run of the applied revision.
	CorrectDrift bool `json:"correctDrift,omitempty"`
	// Backup is the backup taken.
	Backup *schema.BackupInfo `json:"backup,omitempty"`
}

// remoteRun is the RemoteRun of a job.
func (j *tenantJob) remoteRun() RemoteRun {
	return RemoteRun{Revision: j.run.snap.Revision, Trailers: j.run.snap.Trailers, Tenant: j.tenant,
		Desired: j.desired, Sources: remoteSources(j.desired), InputHash: j.inHash, Attempt: j.attempt, Correct: j.correct,
		Preempted: j.isPreempted()}
}

// remoteSources are the sources of td's tenant, node groups and patches,
// in that order.
func remoteSources(td *schema.TenantDesired) []RemoteSource {
	if td == nil {
		return nil
	}
	out := []RemoteSource{remoteSource(td.Tenant.Source)}
	for _, ng := range td.NodeGroups {
		out = append(out, remoteSource(ng.Source))
	}
	for _, p := range td.Patches {
		out = append(out, remoteSource(p.Source))
	}
	return out
}

func remoteSource(s schema.Source) RemoteSource {
	return RemoteSource{File: s.File, Line: s.Line, Lines: s.Lines(), Encrypted: s.Encrypted}
}

// desired returns the run's desired tenant with its objects' sources.
func (req RemoteRun) desired() (*schema.TenantDesired, error) {
	td := req.Desired
	if td == nil {
		return nil, nil
	}
	if td.Tenant == nil || td.Tenant.Metadata.Name != req.Tenant {
		return nil, fmt.Errorf("the run of tenant %s carries no manifest of it", req.Tenant)
	}
	srcs := []*schema.Source{&td.Tenant.Source}
	for _, ng := range td.NodeGroups {
		srcs = append(srcs, &ng.Source)
	}
	for _, p := range td.Patches {
		srcs = append(srcs, &p.Source)
	}
	if len(srcs) != len(req.Sources) {
		return nil, fmt.Errorf("the run of tenant %s carries %d sources for %d objects", req.Tenant, len(req.Sources), len(srcs))
	}
	for i, s := range req.Sources {
		*srcs[i] = schema.NewSource(s.File, s.Line, s.Lines)
		srcs[i].Encrypted = s.Encrypted
	}
	return td, nil
}

// heldShard is the owner's hold on a tenant's shard for one job.
type heldShard struct {
	ctx  context.Context
	done func()
}

// Offloaded reports whether the job runs on the replica that owns the
// tenant rather than in a worker of this queue: asked once, as the job
// leaves the queue. A job this replica owns the tenant of holds its shard
// from here to the end of its run.
func (j *tenantJob) Offloaded() bool {
	o := j.run.r.opts.Owners
	if o == nil || j.run.deliver != nil || j.held != nil {
		return false
	}
	ctx, done, ok := o.Acquire(j.tenant)
	if ok {
		j.held = &heldShard{ctx: ctx, done: done}
	}
	return !ok
}

// Elsewhere reports whether the job would run on another replica now.
func (j *tenantJob) Elsewhere() bool {
	o := j.run.r.opts.Owners
	return o != nil && j.run.deliver == nil && j.held == nil && !o.Owns(j.tenant)
}

// inShard returns ctx, ended also when the job's shard is handed over
// or its replica fences itself, and the function that ends it and lets
// the shard go.
func (j *tenantJob) inShard(ctx context.Context) (context.Context, func()) {
	if j.held == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(j.held.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		j.letGo()
	}
}

// letGo gives the job's shard back, once.
func (j *tenantJob) letGo() {
	if h := j.held; h != nil {
		j.held = nil
		h.done()
	}
}

// runElsewhere hands the job to the replica that owns the tenant and
// records its result, trying again when no live replica owns it or the
// owner stopped or did not answer; once this replica owns the tenant, the
// job runs here. While it runs elsewhere, this replica's drift checks of
// the tenant wait. It returns when ctx ends, or as soon as the queue
// stops (nothing of the run is here to save, and the owner's run goes on
// without its waiting), without a result: the next leader runs the
// revision again.
func (j *tenantJob) runElsewhere(ctx context.Context) {
	r := j.run.r
	if j.attempt == 0 {
		j.run.started(j.tenant)
	}
	req := j.remoteRun()
	j.mu.Lock()
	j.elsewhere = true
	j.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.queue.stopping, cancel)()
	for try, wait := 0, time.Second; ; try, wait = try+1, min(2*wait, 5*time.Second) {
		release := r.drift.hold(j.tenant)
		req.Preempted = j.isPreempted() // a newer revision came since the last try
		res, err := r.opts.Owners.Run(wctx, req)
		release()
		if err == nil {
			j.concludeElsewhere(res)
			return
		}
		if wctx.Err() != nil {
			return
		}
		level := slog.LevelDebug
		if try == 0 {
			level = slog.LevelWarn
		}
		r.log.Log(ctx, level, "a tenant's run did not reach the replica that owns it: trying again when the shards change", "tenant", j.tenant, "revision", req.Revision, "err", err)
		if !awaitShards(wctx, r.opts.Owners, wait) {
			return
		}
		if actx, done, ok := r.opts.Owners.Acquire(j.tenant); ok {
			j.mu.Lock()
			j.elsewhere = false
			j.mu.Unlock()
			j.held = &heldShard{ctx: actx, done: done}
			j.runHere(ctx)
			return
		}
	}
}

// wakeOnShards has the queues look again at which of their jobs would
// run elsewhere at each change of the shards, so that a job of a tenant
// that moved away need not wait for a worker here; it returns when the
// apply queue stops.
func (r *Reconciler) wakeOnShards() {
	for {
		changed := r.opts.Owners.Changed()
		select {
		case <-r.queue.stopping.Done():
			return
		case <-changed:
		}
		r.queue.Wake()
		r.drift.queue.Wake()
		if r.backups != nil {
			r.backups.queue.Wake()
		}
	}
}

// awaitShards waits for a change of the shards, or for at most wait, and
// at least for a tenth of wait: a shard changes holders in two steps, and
// shards move by the dozen. It reports false when ctx ended.
func awaitShards(ctx context.Context, o Owners, wait time.Duration) bool {
	changed := o.Changed()
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait / 10):
	}
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-time.After(wait):
	}
	return true
}

// concludeElsewhere records the result of a run on another replica: the
// retry it asks for goes into this replica's queue, and a success comes
// under this replica's drift checks.
func (j *tenantJob) concludeElsewhere(rr RemoteResult) {
	r, res := j.run.r, rr.Result
	res.Tenant = j.tenant
	if !res.NextAttemptAt.IsZero() {
		retry := &tenantJob{run: j.run, tenant: j.tenant, desired: j.desired, inHash: j.inHash, attempt: rr.RetryAttempt, correct: rr.RetryCorrect}
		if !r.queue.Retry(j.tenant, retry, res.NextAttemptAt.Sub(r.opts.Now())) {
			res.NextAttemptAt = time.Time{}
		}
	}
	if res.Phase == schema.CommitSucceeded && res.Reason != schema.ReasonSuspended {
		r.drift.remember(j.tenant, j.run, j.desired, nil)
	}
	j.run.record(&res, j.attempt > 0)
}

// RunFor runs a tenant's run that the leader handed to this replica, in
// this replica's queue and under the context of the tenant's shard, and
// returns its result; a drift check or a backup (req.Kind) runs on this
// replica's queue of those. It fails with ErrNotOwner when this replica does
// not own the tenant. When ctx ends first (the leader stopped), the run
// goes on and its result is dropped: the next leader's run of the
// revision finds it applied.
func (r *Reconciler) RunFor(ctx context.Context, req RemoteRun) (RemoteResult, error) {
	if r.opts.Owners == nil {
		return RemoteResult{}, ErrNotOwner
	}
	switch req.Kind {
	case "":
	case RemoteDrift:
		return r.checkFor(ctx, req)
	case RemoteBackup:
		return r.backupFor(ctx, req)
	case RemotePreempt:
		return RemoteResult{}, r.preemptFor(req)
	default:
		return RemoteResult{}, fmt.Errorf("%w: %q", errUnknownKind, req.Kind)
	}
	desired, err := req.desired()
	if err != nil {
		return RemoteResult{}, err
	}
	actx, done, ok := r.opts.Owners.Acquire(req.Tenant)
	if !ok {
		return RemoteResult{}, ErrNotOwner
	}
	out := make(chan RemoteResult, 1)
	stopped := make(chan struct{})
	run := &CommitRun{r: r, snap: sources.Snapshot{Revision: req.Revision, Trailers: req.Trailers},
		results: map[string]*schema.TenantResult{}, done: make(chan struct{}),
		deliver: func(res *RemoteResult) {
			if res == nil {
				close(stopped)
				return
			}
			out <- *res
		}}
	r.enqueueRemote(&tenantJob{run: run, tenant: req.Tenant, desired: desired, inHash: req.InputHash,
		attempt: req.Attempt, correct: req.Correct, held: &heldShard{ctx: actx, done: done}, preempted: req.Preempted})
	select {
	case res := <-out:
		return res, nil
	case <-stopped:
		return RemoteResult{}, errOwnerStopped
	case <-ctx.Done():
		return RemoteResult{}, ctx.Err()
	}
}

// retryLater keeps job, a retry of the run's tenant, to run after delay,
// and reports whether it is kept: in this replica's queue, or, for a run
// handed over by the leader, in the leader's (RemoteResult).
func (run *CommitRun) retryLater(job *tenantJob, delay time.Duration) bool {
	if run.deliver != nil {
		run.retryJob = job
		return true
	}
	return run.r.queue.Retry(job.tenant, job, delay)
}

// delivered hands a tenant's result to the leader that handed over the
// run, and reports whether the run was one.
func (run *CommitRun) delivered(res *schema.TenantResult) bool {
	if run.deliver == nil {
		return false
	}
	rr := &RemoteResult{Result: *res}
	if j := run.retryJob; j != nil && !res.NextAttemptAt.IsZero() {
		rr.RetryAttempt, rr.RetryCorrect = j.attempt, j.correct
	}
	run.deliver(rr)
	return true
}
