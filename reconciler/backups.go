package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/backup"
	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Backups of the tenants' etcd. A tenant that declares spec.backup gets a
// backup at each time its policy names: a snapshot streamed from a
// healthy control plane (talos.Plane.Snapshot), with the tenant's TF state
// and a manifest, encrypted and written by package backup to the server's
// backup store. Backups run on a queue of their own
// (BackupOptions.Workers), so they never take an apply's, a preview's or
// a drift check's worker. After each, the newest spec.backup.keep stay and
// the older go.
//
// A backup that fails is tried again with backoff; it sets the tenant's
// BackupFailed condition, which the next success removes, and the gauge
// rezuscloud_tenant_backup_failed. What the tenant's status says of its
// backups (status.backup) is written after every attempt.
//
// Backups are also taken on demand (RequestBackup), and before every
// risky step of the Talos plane (snapshotGate), which waits for one.

// Defaults of backups.
const (
	DefaultBackupRetryBase = time.Minute
	DefaultBackupRetryMax  = 30 * time.Minute
	DefaultBackupTimeout   = 30 * time.Minute
)

// BackupOptions configure the tenants' etcd backups. Store and Keys are
// required: without them the server takes no backups.
type BackupOptions struct {
	Store backup.Store
	Keys  *backup.Keys
	// Workers is how many backups run at once. Default 1.
	Workers int
	// RetryBase and RetryMax set the backoff of a failed backup. Defaults
	// DefaultBackupRetryBase and DefaultBackupRetryMax.
	RetryBase, RetryMax time.Duration
	// Timeout bounds one backup. Default DefaultBackupTimeout.
	Timeout time.Duration
	// Tick is how often the schedule is looked at. Default 1 s.
	Tick time.Duration
}

// ErrNoBackupStore is the error of the backup calls of a server that takes
// no backups.
var ErrNoBackupStore = errors.New("this server takes no etcd backups: it has no backup store or no key to encrypt them with")

// Backup reasons, as manifests and listings show them.
const (
	BackupScheduled = "scheduled"
	BackupRequested = "requested"
)

// backupState is the reconciler's part of backups: the queue and each
// tenant's schedule.
type backupState struct {
	r     *Reconciler
	o     BackupOptions
	queue *Queue

	mu     sync.Mutex
	sched  map[string]*backupSched
	listed map[string][]schema.BackupInfo // by tenant, until the next write

	stop context.CancelFunc
	done chan struct{}
}

// backupSched is where one tenant's backups stand.
type backupSched struct {
	next     time.Time
	attempts int  // failures in a row
	queued   bool // a job of the tenant is queued or runs
	// first: no backup was tried yet; the first waits until the tenant's
	// control plane and Kubernetes API are ready.
	first bool
}

func newBackupState(r *Reconciler, o *BackupOptions) *backupState {
	if o == nil || o.Store == nil || o.Keys == nil {
		return nil
	}
	b := &backupState{r: r, o: *o, sched: map[string]*backupSched{}, listed: map[string][]schema.BackupInfo{}, done: make(chan struct{})}
	if b.o.Workers <= 0 {
		b.o.Workers = 1
	}
	if b.o.RetryBase <= 0 {
		b.o.RetryBase = DefaultBackupRetryBase
	}
	if b.o.RetryMax <= 0 {
		b.o.RetryMax = DefaultBackupRetryMax
	}
	if b.o.Timeout <= 0 {
		b.o.Timeout = DefaultBackupTimeout
	}
	if b.o.Tick <= 0 {
		b.o.Tick = time.Second
	}
	b.queue = NewQueue(QueueOptions{Workers: b.o.Workers, Grace: min(10*time.Second, r.opts.ShutdownGrace)})
	b.queue.Start()
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	go b.loop(ctx)
	return b
}

// close stops scheduling backups and waits for the running ones.
func (b *backupState) close() {
	if b == nil {
		return
	}
	b.stop()
	<-b.done
	b.queue.Stop()
}

// loop queues each tenant's backup when it is due.
func (b *backupState) loop(ctx context.Context) {
	defer close(b.done)
	t := time.NewTicker(b.o.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.schedule(b.r.opts.Now())
	}
}

// schedule queues the backups that are due at now. A tenant's first is
// due at once for an interval, at the schedule's next time for a
// schedule, or where its stored status says the last one leaves it after
// a restart; one that is not bootstrapped yet waits.
func (b *backupState) schedule(now time.Time) {
	policies := b.r.drift.backupPolicies()
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.sched {
		if _, ok := policies[name]; !ok {
			delete(b.sched, name)
			b.r.opts.Metrics.BackedUp(name, nil, true)
		}
	}
	for name, p := range policies {
		s := b.sched[name]
		if s == nil {
			s = &backupSched{next: b.firstDue(name, p, now), first: true}
			b.sched[name] = s
		}
		if s.queued || now.Before(s.next) || !b.bootstrapped(name) || (s.first && !b.ready(name)) {
			continue
		}
		s.first = false
		s.queued = true
		b.queue.Enqueue(name, &backupJob{b: b, tenant: name, reason: BackupScheduled})
	}
}

// firstDue is when a tenant's first backup of this process is due: after
// its last success as its status records it, else at once for an
// interval, at the schedule's next time for a schedule.
func (b *backupState) firstDue(tenant string, p schema.BackupPolicy, now time.Time) time.Time {
	var t schema.Tenant
	_ = b.r.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, tenant, &t) })
	if bs := t.Status.Backup; bs != nil && !bs.LastSuccess.IsZero() {
		return p.Next(bs.LastSuccess)
	}
	if p.Interval != "" {
		return now
	}
	return p.Next(now)
}

// bootstrapped reports whether the tenant's etcd exists, so that a
// backup can be taken of it.
func (b *backupState) bootstrapped(tenant string) bool {
	pl := b.r.opts.Talos
	if pl == nil {
		return false
	}
	rec, ok, err := pl.Bootstrapped(tenant)
	return err == nil && ok && rec.Done
}

// ready reports whether the tenant's control planes are ready and its
// Kubernetes API answers, as its status says.
func (b *backupState) ready(tenant string) bool {
	var t schema.Tenant
	err := b.r.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, tenant, &t) })
	return err == nil && t.Status.ControlPlaneReady && t.Status.APIReady
}

// backupJob is one backup on the backup queue. waiters get its result.
// Among replicas, a backup of a tenant that another replica owns is
// taken by that one (remotework.go).
type backupJob struct {
	b       *backupState
	tenant  string
	reason  string
	waiters []func(schema.BackupInfo, error)

	// held is the tenant's shard, held by this replica for the backup.
	held *heldShard
	// given: the leader handed the backup over. This replica takes it
	// and leaves the schedule and the record to the leader.
	given bool
	// keep is how many backups stay after it, unless the applied policy
	// that this replica knows says; 0 deletes none.
	keep int
}

func (j *backupJob) Run(ctx context.Context) {
	var info schema.BackupInfo
	var err error
	if j.given {
		ctx, cancel := context.WithTimeout(ctx, j.b.o.Timeout)
		info, err = j.attempt(ctx)
		cancel()
	} else {
		info, err = j.b.take(ctx, j)
	}
	for _, w := range j.waiters {
		w(info, err)
	}
}

// Superseded hands the waiters to the job that takes this one's place,
// which takes a backup as fresh as this one would have.
func (j *backupJob) Superseded(by Job) {
	if next, ok := by.(*backupJob); ok {
		next.waiters = append(next.waiters, j.waiters...)
		if j.reason != BackupScheduled && next.reason == BackupScheduled {
			next.reason = j.reason
		}
		if next.given && !j.given {
			next.given = false // this replica's own backup records itself
		}
		return
	}
	for _, w := range j.waiters {
		w(schema.BackupInfo{}, errors.New("the backup was cancelled"))
	}
}

// take takes one backup of the job's tenant and records its outcome.
func (b *backupState) take(ctx context.Context, j *backupJob) (schema.BackupInfo, error) {
	tenant, reason := j.tenant, j.reason
	ctx, cancel := context.WithTimeout(ctx, b.o.Timeout)
	defer cancel()
	start := b.r.opts.Now()
	info, err := j.attempt(ctx)
	if err != nil {
		b.r.log.Warn("etcd backup", "tenant", tenant, "reason", reason, "err", err)
	} else {
		b.r.log.Info("etcd backup", "tenant", tenant, "reason", reason, "id", info.ID, "bytes", info.SizeBytes, "took", b.r.opts.Now().Sub(start))
	}
	b.r.opts.Metrics.BackedUp(tenant, err, false)
	next := b.reschedule(tenant, err)
	if rerr := b.record(tenant, start, info, next, err); rerr != nil {
		b.r.log.Error("record the etcd backup", "tenant", tenant, "err", rerr)
	}
	return info, err
}

// attempt writes the backup and deletes those past the tenant's keep,
// here or on the replica that owns the tenant. Its error is redacted.
func (j *backupJob) attempt(ctx context.Context) (schema.BackupInfo, error) {
	b := j.b
	if b.r.opts.Owners != nil && j.held == nil {
		return j.attemptElsewhere(ctx)
	}
	if h := j.held; h != nil {
		j.held = nil
		defer h.done()
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(h.ctx, cancel)()
	}
	if p, ok := b.r.drift.backupPolicies()[j.tenant]; ok && !j.given {
		j.keep = p.Keep
	}
	info, err := b.write(ctx, j.tenant, j.reason)
	if err == nil {
		_, err = b.prune(ctx, j.tenant, j.keep)
	}
	if err != nil {
		return info, errors.New(redact.Text(err.Error()))
	}
	return info, nil
}

// write streams a snapshot of the tenant's etcd, with its TF state, into
// the backup store.
func (b *backupState) write(ctx context.Context, tenant, reason string) (schema.BackupInfo, error) {
	pl := b.r.opts.Talos
	if pl == nil {
		return schema.BackupInfo{}, errors.New("the server runs no Talos plane")
	}
	var t schema.Tenant
	var state []byte
	err := b.r.store.View(func(tx store.Tx) error {
		if err := tx.GetObject(schema.KindTenant, tenant, &t); err != nil {
			return err
		}
		state = slices.Clone(store.CurrentState(tx, tenant))
		return nil
	})
	if err != nil {
		return schema.BackupInfo{}, fmt.Errorf("read the tenant: %w", err)
	}
	bundle := b.r.TalosBundle(tenant)
	if bundle == nil {
		return schema.BackupInfo{}, errors.New("the tenant's secrets bundle cannot be read yet: its state is encrypted and no run has read it since the server started")
	}
	machines, err := b.r.storedMachines(tenant)
	if err != nil {
		return schema.BackupInfo{}, err
	}
	snap, si, err := pl.Snapshot(ctx, tenant, bundle, talos.MachinesOf(machines))
	if err != nil {
		return schema.BackupInfo{}, err
	}
	defer snap.Close()
	m := schema.BackupInfo{
		Tenant: tenant, Time: b.r.opts.Now().UTC(), Machine: si.Machine,
		Etcd:         schema.BackupEtcd{RaftIndex: si.RaftIndex, DBSizeBytes: si.DBSizeBytes},
		TalosVersion: t.Spec.TalosVersion, KubernetesVersion: t.Spec.KubernetesVersion,
		Commit: t.Status.ObservedCommit, Reason: reason,
	}
	info, err := backup.Write(ctx, b.o.Store, b.o.Keys, m, snap, state)
	b.forgetListing(tenant)
	return info, err
}

// prune keeps the newest keep backups of tenant (spec.backup.keep); 0
// keeps them all.
func (b *backupState) prune(ctx context.Context, tenant string, keep int) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	defer b.forgetListing(tenant)
	gone, err := backup.Prune(ctx, b.o.Store, b.o.Keys, tenant, keep)
	if err != nil {
		return gone, fmt.Errorf("delete old backups: %w", err)
	}
	return gone, nil
}

// reschedule sets when the tenant's next backup is due after one that
// ended with err: the policy's next time after a success, a backoff after
// a failure. It returns that time.
func (b *backupState) reschedule(tenant string, err error) time.Time {
	now := b.r.opts.Now()
	p, declared := b.r.drift.backupPolicies()[tenant]
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sched[tenant]
	if s == nil {
		s = &backupSched{}
		b.sched[tenant] = s
	}
	s.queued = false
	switch {
	case err != nil:
		s.attempts++
		s.next = now.Add(backoff.Policy{Base: b.o.RetryBase, Max: b.o.RetryMax, Jitter: retryJitter}.Delay(s.attempts))
	case declared:
		s.attempts, s.next = 0, p.Next(now)
	default:
		s.attempts, s.next = 0, time.Time{}
	}
	return s.next
}

// record writes the outcome of a backup into the tenant's status.backup
// and its BackupFailed condition.
func (b *backupState) record(tenant string, attempt time.Time, info schema.BackupInfo, next time.Time, failed error) error {
	count := -1
	if failed == nil {
		if list, err := b.list(context.Background(), tenant); err == nil {
			count = len(list)
		}
	}
	_, err := status.WriteChanged(b.r.store, b.r.opts.Now(), func(rec status.Recorder) (bool, error) {
		return rec.BackedUp(tenant, status.Backup{Attempt: attempt, Info: info, Next: next, Count: count, Err: failed})
	})
	return err
}

// list returns the tenant's backups, from memory since the last write.
func (b *backupState) list(ctx context.Context, tenant string) ([]schema.BackupInfo, error) {
	b.mu.Lock()
	l, ok := b.listed[tenant]
	b.mu.Unlock()
	if ok {
		return l, nil
	}
	l, err := backup.List(ctx, b.o.Store, b.o.Keys, tenant)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.listed[tenant] = l
	b.mu.Unlock()
	return l, nil
}

func (b *backupState) forgetListing(tenant string) {
	b.mu.Lock()
	delete(b.listed, tenant)
	b.mu.Unlock()
}

// enqueue queues a backup of tenant for reason, after which keep backups
// stay (or as many as the applied policy says, where this replica knows
// it; 0 deletes none), and returns a channel that gets its result.
func (b *backupState) enqueue(tenant, reason string, keep int) <-chan backupResult {
	ch := make(chan backupResult, 1)
	b.mu.Lock()
	if s := b.sched[tenant]; s != nil {
		s.queued = true
	}
	b.mu.Unlock()
	b.queue.Enqueue(tenant, &backupJob{b: b, tenant: tenant, reason: reason, keep: keep,
		waiters: []func(schema.BackupInfo, error){func(i schema.BackupInfo, err error) { ch <- backupResult{i, err} }}})
	return ch
}

type backupResult struct {
	info schema.BackupInfo
	err  error
}

// TakesBackups reports whether the server takes etcd backups: it has a
// backup store and a key to encrypt them with.
func (r *Reconciler) TakesBackups() bool { return r.backups != nil }

// ListBackups lists a tenant's backups, oldest first: metadata only.
func (r *Reconciler) ListBackups(ctx context.Context, tenant string) ([]schema.BackupInfo, error) {
	if r.backups == nil {
		return nil, ErrNoBackupStore
	}
	if err := r.knownTenant(tenant); err != nil {
		return nil, err
	}
	return r.backups.list(ctx, tenant)
}

// knownTenant is nil for a tenant the store holds, store.ErrNotFound
// (wrapped) for another.
func (r *Reconciler) knownTenant(tenant string) error {
	return r.store.View(func(tx store.Tx) error {
		_, err := tx.Get(schema.KindTenant, tenant)
		if err != nil {
			return fmt.Errorf("tenant %s: %w", tenant, err)
		}
		return nil
	})
}

// RequestBackup queues a backup of tenant now, as reason says (who asked
// for it). It changes nothing of the cluster.
func (r *Reconciler) RequestBackup(_ context.Context, tenant, by string) error {
	if r.backups == nil {
		return ErrNoBackupStore
	}
	if err := r.knownTenant(tenant); err != nil {
		return err
	}
	if !r.backups.bootstrapped(tenant) {
		return fmt.Errorf("tenant %s has no etcd to back up yet", tenant)
	}
	reason := BackupRequested
	if by != "" {
		reason += " by " + by
	}
	r.backups.enqueue(tenant, reason, 0)
	return nil
}

// DownloadBackup writes a backup's objects, encrypted as they are
// stored, as a tar stream.
func (r *Reconciler) DownloadBackup(ctx context.Context, tenant, id string, w io.Writer) error {
	if r.backups == nil {
		return ErrNoBackupStore
	}
	if err := r.knownTenant(tenant); err != nil {
		return err
	}
	return backup.Download(ctx, r.backups.o.Store, tenant, id, w)
}

// backupPolicies are the backup policies of the applied tenants that
// declare one, as applied.
func (d *driftState) backupPolicies() map[string]schema.BackupPolicy {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]schema.BackupPolicy{}
	for name, ap := range d.applied {
		if p := ap.desired.Tenant.Spec.Backup; p != nil {
			out[name] = *p
		}
	}
	return out
}

// snapshotGate is the Talos plane's gate before a risky step of the
// run's tenant (talos.Desired.Snapshot): a backup on the backup queue,
// waited for, after which the tenant's spec.backup.keep stay. Nil when
// the server takes no backups.
func (t *tenantRun) snapshotGate() talos.SnapshotGate {
	r := t.r
	if r.backups == nil {
		return nil
	}
	keep := 0
	if t.desired != nil && t.desired.Tenant.Spec.Backup != nil {
		keep = t.desired.Tenant.Spec.Backup.Keep
	}
	return func(ctx context.Context, reason string) (string, error) {
		select {
		case res := <-r.backups.enqueue(t.name, reason, keep):
			return res.info.ID, res.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
