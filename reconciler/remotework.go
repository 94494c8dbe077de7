package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// A tenant's drift checks and etcd backups go with the tenant to the
// replica that owns it, as its runs do (remote.go). The leader keeps
// their schedule (what each tenant had applied, when its next check and
// backup are due), queues the corrections that checks ask for and
// records each backup's outcome in the tenant's status. The owner runs
// the check, or takes the backup, on its own queue of those and under
// the tenant's shard, and answers with what it found: a check records
// the tenant's Drifted condition itself, since its store writes are the
// owner's.

// Kinds of RemoteRun besides a run of the tenant.
const (
	RemoteDrift  = "drift"
	RemoteBackup = "backup"
	// RemotePreempt tells the owner that a job of a newer revision waits
	// behind the tenant's run of Revision.
	RemotePreempt = "preempt"
)

var errUnknownKind = errors.New("unknown kind of handed-over work")

// Offloaded reports whether the check runs on the replica that owns the
// tenant; a check that this replica owns the tenant of holds its shard
// from here to its end. A check handed over to this replica is never
// sent on: it fails with ErrNotOwner when the tenant has moved.
func (j *driftJob) Offloaded() bool {
	return offload(j.d.r.opts.Owners, j.tenant, j.given != nil, &j.held)
}

// Elsewhere reports whether the check would run on another replica now.
func (j *driftJob) Elsewhere() bool {
	return elsewhere(j.d.r.opts.Owners, j.tenant, j.given != nil, j.held)
}

// elsewhere is the Elsewhere of a job of tenant: what offload would
// answer now, taking nothing.
func elsewhere(o Owners, tenant string, given bool, held *heldShard) bool {
	return o != nil && !given && held == nil && !o.Owns(tenant)
}

// offload is the Offloaded of a job of tenant: false when this replica
// owns the tenant (*held is then its shard) or there are no Owners, and
// also for a job given to this replica, which never goes on elsewhere.
func offload(o Owners, tenant string, given bool, held **heldShard) bool {
	if o == nil {
		return false
	}
	if ctx, done, ok := o.Acquire(tenant); ok {
		*held = &heldShard{ctx: ctx, done: done}
		return false
	}
	return !given
}

// checkElsewhere has the replica that owns the tenant check it, and
// queues the correction it asks for.
func (j *driftJob) checkElsewhere(ctx context.Context) error {
	r := j.d.r
	if !j.wait && r.queue.busy(j.tenant) {
		return nil
	}
	r.drift.mu.Lock()
	ap, ok := r.drift.applied[j.tenant]
	r.drift.mu.Unlock()
	if !ok {
		return nil
	}
	res, held, err := r.toOwner(ctx, RemoteRun{Kind: RemoteDrift, Wait: j.wait, Revision: ap.run.snap.Revision, Trailers: ap.run.snap.Trailers,
		Tenant: j.tenant, Desired: ap.desired, Sources: remoteSources(ap.desired), InputHash: ap.inHash})
	switch {
	case held != nil:
		j.held = held
		return j.check(ctx)
	case err != nil && ctx.Err() != nil:
		return nil
	case err != nil:
		r.log.Warn("a drift check did not reach the replica that owns the tenant", "tenant", j.tenant, "err", err)
		return fmt.Errorf("drift check %s: the replica that owns it: %w", j.tenant, err)
	}
	if res.CorrectDrift && r.drift.correct(j.tenant, ap) {
		r.log.Info("correcting drift: the applied revision runs again", "tenant", j.tenant, "revision", ap.run.snap.Revision)
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}

// checkFor runs a drift check that the leader handed to this replica, on
// this replica's drift queue, and returns what it found.
func (r *Reconciler) checkFor(ctx context.Context, req RemoteRun) (RemoteResult, error) {
	desired, err := req.desired()
	if err != nil {
		return RemoteResult{}, err
	}
	if desired == nil {
		return RemoteResult{}, fmt.Errorf("the drift check of tenant %s carries no applied manifests", req.Tenant)
	}
	if !r.owns(req.Tenant) {
		return RemoteResult{}, ErrNotOwner
	}
	ended := make(chan error, 1)
	j := &driftJob{d: r.drift, tenant: req.Tenant, wait: req.Wait, done: func(err error) { ended <- err },
		given: &appliedRun{run: &CommitRun{r: r, snap: sources.Snapshot{Revision: req.Revision, Trailers: req.Trailers}}, desired: desired, inHash: req.InputHash}}
	r.drift.queue.Enqueue(req.Tenant, j)
	select {
	case err := <-ended:
		if errors.Is(err, ErrNotOwner) || errors.Is(err, errOwnerStopped) {
			return RemoteResult{}, err
		}
		res := RemoteResult{CorrectDrift: j.askCorrect}
		if err != nil {
			res.Error = err.Error()
		}
		return res, nil
	case <-ctx.Done():
		return RemoteResult{}, ctx.Err()
	}
}

// Elsewhere reports whether the backup would be taken by another
// replica now.
func (j *backupJob) Elsewhere() bool {
	return elsewhere(j.b.r.opts.Owners, j.tenant, j.given, j.held)
}

// Offloaded reports whether the backup is taken by the replica that owns
// the tenant; see driftJob.Offloaded.
func (j *backupJob) Offloaded() bool {
	return offload(j.b.r.opts.Owners, j.tenant, j.given, &j.held)
}

// attemptElsewhere has the replica that owns the tenant take the backup.
func (j *backupJob) attemptElsewhere(ctx context.Context) (schema.BackupInfo, error) {
	b := j.b
	if j.given {
		return schema.BackupInfo{}, ErrNotOwner
	}
	defer b.forgetListing(j.tenant)
	res, held, err := b.r.toOwner(ctx, RemoteRun{Kind: RemoteBackup, Tenant: j.tenant, Reason: j.reason,
		Keep: b.r.drift.backupPolicies()[j.tenant].Keep})
	switch {
	case held != nil:
		j.held = held
		return j.attempt(ctx)
	case err != nil:
		return schema.BackupInfo{}, fmt.Errorf("the replica that owns the tenant: %w", err)
	case res.Error != "":
		return schema.BackupInfo{}, errors.New(res.Error)
	case res.Backup == nil:
		return schema.BackupInfo{}, errors.New("the replica that owns the tenant answered with no backup")
	}
	return *res.Backup, nil
}

// backupFor takes a backup that the leader handed to this replica, on
// this replica's backup queue, and returns it.
func (r *Reconciler) backupFor(ctx context.Context, req RemoteRun) (RemoteResult, error) {
	if r.backups == nil {
		return RemoteResult{}, ErrNoBackupStore
	}
	if !r.owns(req.Tenant) {
		return RemoteResult{}, ErrNotOwner
	}
	ch := make(chan backupResult, 1)
	r.backups.queue.Enqueue(req.Tenant, &backupJob{b: r.backups, tenant: req.Tenant, reason: req.Reason, given: true, keep: req.Keep,
		waiters: []func(schema.BackupInfo, error){func(i schema.BackupInfo, err error) { ch <- backupResult{i, err} }}})
	select {
	case res := <-ch:
		if errors.Is(res.err, ErrNotOwner) {
			return RemoteResult{}, res.err
		}
		if res.err != nil {
			r.log.Warn("etcd backup for the leader", "tenant", req.Tenant, "reason", req.Reason, "err", res.err)
			return RemoteResult{Error: res.err.Error()}, nil
		}
		r.log.Info("etcd backup for the leader", "tenant", req.Tenant, "reason", req.Reason, "id", res.info.ID, "bytes", res.info.SizeBytes)
		return RemoteResult{Backup: &res.info}, nil
	case <-ctx.Done():
		return RemoteResult{}, ctx.Err()
	}
}

// ownerTries bounds how often toOwner sends one piece of work: its waits
// add up to about 17 s, past a handover of shards.
const ownerTries = 6

// toOwner sends req to the replica that owns its tenant and returns its
// answer. While no live replica owns the tenant, or the owner does not
// answer, it tries again when the shards change, up to ownerTries times,
// and stops trying once this replica owns the tenant: held is then its
// shard, and the work is this replica's to do.
func (r *Reconciler) toOwner(ctx context.Context, req RemoteRun) (res RemoteResult, held *heldShard, err error) {
	o := r.opts.Owners
	for try, wait := 1, time.Second; ; try, wait = try+1, min(2*wait, 5*time.Second) {
		if res, err = o.Run(ctx, req); err == nil || ctx.Err() != nil || try == ownerTries {
			return res, nil, err
		}
		r.log.Debug("handed-over work did not reach the replica that owns the tenant: trying again when the shards change", "tenant", req.Tenant, "kind", req.Kind, "err", err)
		if !awaitShards(ctx, o, wait) {
			return res, nil, err
		}
		if sctx, done, ok := o.Acquire(req.Tenant); ok {
			return RemoteResult{}, &heldShard{ctx: sctx, done: done}, nil
		}
	}
}

// isElsewhere reports whether the job runs on the replica that owns the
// tenant.
func (j *tenantJob) isElsewhere() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.elsewhere
}

func (j *tenantJob) isPreempted() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.preempted
}

// preemptElsewhere tells the replica that runs the job that a job of
// revision waits behind it, so that its drains end early as they do
// here. A run that has not reached the owner yet carries it (Preempted).
func (j *tenantJob) preemptElsewhere(revision string) {
	r := j.run.r
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.opts.Owners.Run(ctx, RemoteRun{Kind: RemotePreempt, Tenant: j.tenant, Revision: j.run.snap.Revision}); err != nil {
		r.log.Info("a newer revision could not cut the tenant's run on its owner short", "tenant", j.tenant, "revision", revision, "err", err)
	}
}

// preemptFor preempts this replica's job of the tenant's run of
// req.Revision that the leader handed over, running or queued. A run not
// here yet (the leader sent it a moment before the preempt, which came
// first) starts preempted if it arrives within earlyPreemptTTL.
func (r *Reconciler) preemptFor(req RemoteRun) error {
	r.early.mu.Lock()
	defer r.early.mu.Unlock()
	j, ok := r.queue.job(req.Tenant).(*tenantJob)
	if !ok || j.run.deliver == nil || j.run.snap.Revision != req.Revision {
		r.early.noteLocked(req.Tenant, req.Revision, r.opts.Now())
		return nil
	}
	j.preempt()
	return nil
}

// earlyPreemptTTL is how long a preempt waits for its run.
const earlyPreemptTTL = time.Minute

// earlyPreempts are the preempts that came before their run, by tenant
// and revision, with when they came. mu also orders a run's arrival
// (enqueueRemote) with a preempt's (preemptFor), so that each sees the
// other.
type earlyPreempts struct {
	mu sync.Mutex
	at map[[2]string]time.Time
}

// noteLocked remembers a preempt of the run of tenant at revision, and
// forgets those older than earlyPreemptTTL. mu is held.
func (e *earlyPreempts) noteLocked(tenant, revision string, now time.Time) {
	if e.at == nil {
		e.at = map[[2]string]time.Time{}
	}
	for k, t := range e.at {
		if now.Sub(t) > earlyPreemptTTL {
			delete(e.at, k)
		}
	}
	e.at[[2]string{tenant, revision}] = now
}

// takeLocked reports whether a preempt of the run of tenant at revision
// came within earlyPreemptTTL, and forgets it. mu is held.
func (e *earlyPreempts) takeLocked(tenant, revision string, now time.Time) bool {
	k := [2]string{tenant, revision}
	t, ok := e.at[k]
	delete(e.at, k)
	return ok && now.Sub(t) <= earlyPreemptTTL
}

// enqueueRemote queues the job of a run the leader handed over, preempted
// if its preempt came first.
func (r *Reconciler) enqueueRemote(j *tenantJob) {
	r.early.mu.Lock()
	defer r.early.mu.Unlock()
	if r.early.takeLocked(j.tenant, j.run.snap.Revision, r.opts.Now()) {
		j.preempted = true
	}
	r.queue.Enqueue(j.tenant, j)
}

// owns reports whether this replica owns the tenant now.
func (r *Reconciler) owns(tenant string) bool {
	_, done, ok := r.opts.Owners.Acquire(tenant)
	done()
	return ok
}
