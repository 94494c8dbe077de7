package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// Annotations and trailers the reconciler reads.
const (
	// AnnotationDeletionProtection on a Tenant keeps it from ever being
	// destroyed while its last applied manifest carries "true".
	AnnotationDeletionProtection = "rezuscloud.io/deletion-protection"
	// TrailerAllowDeletions in a commit message allows that commit to
	// destroy up to N tenants at once.
	TrailerAllowDeletions = "Rezuscloud-Allow-Deletions"
)

// kindApplied is the store kind of the reconciler's own record of what it
// applied to each tenant. The API does not serve it.
const kindApplied = "AppliedTenant"

// kindObserved is the store kind of the reconciler's record of the last
// revision of the main ref it received. The API does not serve it.
const kindObserved = "ObservedRevision"

// Options configure a Reconciler. DataDir and StateURL are required.
type Options struct {
	// DataDir holds the per-tenant work directories under work/.
	DataDir string
	// StateURL is the base URL of the server's own state backend; a
	// tenant's state lives at StateURL/tfstate/TENANT.
	StateURL string
	// Credentials returns the credentials for one run against the state
	// backend and a function that revokes them afterwards. Nil means the
	// backend needs none.
	Credentials func(tenant string) (username, password string, revoke func())
	// LockHolder names the token that the state lock records for the runs
	// of a tenant: the username Credentials gives. A lock it holds while
	// no run of the tenant is in progress was left by a run that died, and
	// is released (see Recover). Nil: locks are never released.
	LockHolder func(tenant string) string
	// Audit, when set, records every state lock the reconciler releases.
	Audit *slog.Logger
	// MaxDeletions is how many tenants one commit may destroy without the
	// Rezuscloud-Allow-Deletions trailer. Default 1.
	MaxDeletions int
	// Workers is how many tenants run tofu at once. Default 2.
	Workers int
	// Debounce is how long a tenant stays quiet before its newest
	// revision runs; bursts of commits coalesce. Default 0.
	Debounce time.Duration
	// ShutdownGrace is how long Close waits for running tofu processes
	// before it interrupts them with SIGINT. Default 10 minutes.
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// OnCommit, when set, is called with a copy of every Commit the
	// reconciler records, as it records it: commit status reporters hang
	// here. It must not block.
	OnCommit func(*schema.Commit)
	// EncryptState says that tofu runs encrypt state (TF_ENCRYPTION is in
	// the runner's environment). A tenant whose stored state is still
	// plain is then applied once even when nothing changed, so that its
	// state gets written encrypted.
	EncryptState bool
	// KubeconfigValidity is how long the client certificate of a
	// downloaded kubeconfig is valid. Default one year.
	KubeconfigValidity time.Duration
	// Metrics, when set, records each tenant's reconcile and the revision
	// applied to it.
	Metrics *metrics.Metrics
	// Now returns the current time; tests may fix it.
	Now func() time.Time
}

// Reconciler turns snapshots of the repository into applied state.
type Reconciler struct {
	store   *backend.Store
	runner  *Runner
	modules render.Modules
	opts    Options
	log     *slog.Logger

	queue    *Queue
	previews *Queue
	secrets  secretsCache

	mu          sync.Mutex
	lastApplied string // the revision of the last commit that finished without failures
	lastCommit  string
}

// New returns a Reconciler. It records the built-in provider modules as
// Provider resources.
func New(store *backend.Store, runner *Runner, modules render.Modules, opts Options) (*Reconciler, error) {
	if opts.DataDir == "" || opts.StateURL == "" {
		return nil, errors.New("reconciler: DataDir and StateURL are required")
	}
	if opts.MaxDeletions <= 0 {
		opts.MaxDeletions = 1
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.KubeconfigValidity = defaultValidity(opts.KubeconfigValidity)
	r := &Reconciler{store: store, runner: runner, modules: modules, opts: opts, log: opts.Logger,
		queue: NewQueue(QueueOptions{Workers: opts.Workers, Debounce: opts.Debounce, Grace: opts.ShutdownGrace})}
	r.queue.Start()
	// Previews have a worker of their own, so they never hold up applies;
	// they plan without the state lock, so they never block one either.
	r.previews = NewQueue(QueueOptions{Workers: 1, Grace: time.Minute})
	r.previews.Start()
	if err := r.putProviders(); err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops the queue: pending runs are superseded, running ones get
// ShutdownGrace to finish before tofu is interrupted.
func (r *Reconciler) Close() {
	r.previews.Stop()
	r.queue.Stop()
}

// Queue returns the apply queue.
func (r *Reconciler) Queue() *Queue { return r.queue }

// LastObserved returns the last revision of the main ref the reconciler
// received, also from before a restart; "" when none.
func (r *Reconciler) LastObserved() string {
	var rev string
	_ = r.store.View(func(tx *backend.Tx) error {
		if res, err := tx.Get(kindObserved, "main"); err == nil {
			_ = json.Unmarshal(res.Object, &rev)
		}
		return nil
	})
	return rev
}

// Runner returns the tofu runner, whose counter tells how many tofu
// processes ran.
func (r *Reconciler) Runner() *Runner { return r.runner }

// Status reports the reconciler's part of /api/v1/status: the last
// commits seen and applied, and the tofu run count.
func (r *Reconciler) Status() api.ReconcilerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return api.ReconcilerStatus{LastCommit: r.lastCommit, LastAppliedCommit: r.lastApplied, TofuRuns: r.runner.Runs()}
}

// Run submits every snapshot it receives until ctx is done.
// When ctx ends it closes the queue, waiting for running tofu processes.
func (r *Reconciler) Run(ctx context.Context, in <-chan sources.Snapshot) {
	for {
		select {
		case <-ctx.Done():
			r.Close()
			return
		case snap := <-in:
			r.Submit(snap)
		}
	}
}

// appliedRecord is what the reconciler remembers of a tenant after a run.
type appliedRecord struct {
	Tenant       string            `json:"tenant"`
	Revision     string            `json:"revision"`
	InputHash    string            `json:"inputHash"`
	RenderedHash string            `json:"renderedHash"`
	InitInputs   []byte            `json:"initInputs"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Model        modeldiff.Model   `json:"model"`
}

// Reconcile runs one revision through the ordered steps (load, validate,
// render, diff, apply, project) and waits until every tenant it touches has
// finished or been superseded by a newer revision.
func (r *Reconciler) Reconcile(ctx context.Context, snap sources.Snapshot) (*schema.Commit, error) {
	run := r.Submit(snap)
	select {
	case <-run.Done():
		return run.Commit(), nil
	case <-ctx.Done():
		return run.Commit(), ctx.Err()
	}
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
	c.Status.NonFastForward = snap.NonFastForward
	c.Status.Timings.ReceivedAt = r.opts.Now()
	run := &CommitRun{r: r, commit: c, snap: snap, done: make(chan struct{}), results: map[string]*schema.TenantResult{}}
	// A revision seen before (after a restart, or a rollback to it) keeps
	// its finished record unless this run changes something.
	run.previous = r.finishedCommit(c.Metadata.Name)
	r.mu.Lock()
	r.lastCommit = snap.Revision
	r.mu.Unlock()
	if r.LastObserved() != snap.Revision {
		if err := r.store.Update(func(tx *backend.Tx) error {
			_, err := tx.Put(kindObserved, "main", mustJSON(snap.Revision))
			return err
		}); err != nil {
			r.log.Error("record observed revision", "revision", snap.Revision, "err", err)
		}
	}

	c.Status.Phase = schema.CommitValidating
	run.put()

	applied, err := r.appliedRecords()
	if err != nil {
		run.quiet(false)
		r.fail(c, err)
		close(run.done)
		return run
	}
	desired, probs := r.load(snap, applied)
	c.Status.Timings.ValidatedAt = r.opts.Now()
	if len(probs) > 0 {
		c.Status.Phase = schema.CommitInvalid
		c.Status.Problems = probs
		c.Status.Message = fmt.Sprintf("%d problems: nothing was applied; the last good commit stays in effect", len(probs))
		c.Status.Timings.FinishedAt = r.opts.Now()
		if run.previous != nil && run.previous.Status.Phase != schema.CommitInvalid {
			run.quiet(false)
		}
		run.put()
		if run.previous != nil {
			run.commit = run.previous
		}
		close(run.done)
		return run
	}

	// Work out which tenants go, and whether this commit may remove them.
	want := map[string]*schema.TenantDesired{}
	for _, td := range desired.Tenants {
		want[td.Tenant.Metadata.Name] = td
	}
	var gone []string
	for name := range applied {
		if want[name] == nil {
			gone = append(gone, name)
		}
	}
	sort.Strings(gone)
	var deletions []string
	for _, name := range gone {
		if applied[name].Annotations[AnnotationDeletionProtection] == "true" {
			run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitFailed,
				Error: fmt.Sprintf("tenant %s has deletion protection and was not destroyed: restore its manifest with annotation %s: \"false\", let that commit apply, then remove it", name, AnnotationDeletionProtection)}
			continue
		}
		deletions = append(deletions, name)
	}
	if n := len(deletions); n > 0 {
		allowed := allowedDeletions(snap.Trailers)
		all := len(desired.Tenants) == 0 && len(applied) > 0
		if (n > r.opts.MaxDeletions || all) && allowed < n {
			why := fmt.Sprintf("this commit would destroy %d tenants (%s)", n, strings.Join(deletions, ", "))
			if all {
				why = fmt.Sprintf("this commit would destroy every tenant (%s)", strings.Join(deletions, ", "))
			}
			run.message = fmt.Sprintf("%s, more than --max-deletions=%d allows: nothing was destroyed; add the trailer \"%s: %d\" to the commit message to allow it", why, r.opts.MaxDeletions, TrailerAllowDeletions, n)
			for _, name := range deletions {
				run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitFailed, Error: run.message}
			}
			deletions = nil
		}
	}

	c.Status.Phase = schema.CommitPlanning
	run.outstanding = len(desired.Tenants) + len(deletions)
	run.put()
	if run.outstanding == 0 {
		run.finish()
		return run
	}
	run.mu.Lock()
	for _, td := range desired.Tenants {
		name := td.Tenant.Metadata.Name
		run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitPending}
	}
	for _, name := range deletions {
		run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitPending}
	}
	run.commit.Status.Tenants = run.sortedResults()
	run.mu.Unlock()
	run.put()
	// Tenants whose manifests changed since their last apply go first: the
	// others need no tofu and finish in moments, and must not delay them.
	tenants := slices.Clone(desired.Tenants)
	changed := map[string]bool{}
	for _, td := range tenants {
		prev := applied[td.Tenant.Metadata.Name]
		changed[td.Tenant.Metadata.Name] = prev == nil || prev.InputHash != inputHash(td)
	}
	sort.SliceStable(tenants, func(i, j int) bool {
		return changed[tenants[i].Tenant.Metadata.Name] && !changed[tenants[j].Tenant.Metadata.Name]
	})
	for _, td := range tenants {
		r.queue.Enqueue(td.Tenant.Metadata.Name, &tenantJob{run: run, tenant: td.Tenant.Metadata.Name, desired: td})
	}
	for _, name := range deletions {
		r.queue.Enqueue(name, &tenantJob{run: run, tenant: name})
	}
	return run
}

// CommitRun follows one revision through the queue.
type CommitRun struct {
	r    *Reconciler
	snap sources.Snapshot

	mu          sync.Mutex
	commit      *schema.Commit
	results     map[string]*schema.TenantResult
	outstanding int
	message     string
	done        chan struct{}
	// previous is the finished record of the same revision from an
	// earlier run; while set, the record is left alone.
	previous *schema.Commit
	// flush is a pending write of the record (see putSoon); finished is
	// set once the final one is done.
	flush    *time.Timer
	finished bool
}

// progressDelay is how long the progress of tenants that need no tofu may
// wait before the commit's record shows it.
const progressDelay = 250 * time.Millisecond

// putSoon records the commit within progressDelay, in one write for however
// many tenants progress meanwhile: a commit that leaves most of many
// tenants unchanged then writes its record a few times, not twice per
// tenant. Called with run.mu held.
func (run *CommitRun) putSoon() {
	if run.flush != nil || run.finished {
		return
	}
	run.flush = time.AfterFunc(progressDelay, func() {
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
	c := *run.commit
	c.Status.Tenants = slices.Clone(c.Status.Tenants)
	for i := range c.Status.Tenants {
		if c.Status.Tenants[i].Phase != schema.CommitFailed {
			c.Status.Tenants[i].OutputTail = ""
		}
	}
	run.r.putCommit(&c)
	run.commit.Metadata = c.Metadata
}

// quiet keeps (true) or stops keeping (false) the earlier record.
func (run *CommitRun) quiet(keep bool) {
	if !keep {
		run.previous = nil
	}
}

// Done is closed when every tenant of the revision has finished or been
// superseded.
func (run *CommitRun) Done() <-chan struct{} { return run.done }

// Commit returns a copy of the revision's Commit as it stands.
func (run *CommitRun) Commit() *schema.Commit {
	run.mu.Lock()
	defer run.mu.Unlock()
	c := *run.commit
	c.Status.Tenants = append([]schema.TenantResult(nil), c.Status.Tenants...)
	return &c
}

// started marks the tenant, and the commit when it is the first, as
// applying. quick says the tenant needs no tofu run.
func (run *CommitRun) started(tenant string, quick bool) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.commit.Status.Phase == schema.CommitPlanning {
		run.commit.Status.Phase = schema.CommitApplying
		run.commit.Status.Timings.PlannedAt = run.r.opts.Now()
	}
	run.results[tenant] = &schema.TenantResult{Tenant: tenant, Phase: schema.CommitApplying, StartedAt: run.r.opts.Now()}
	run.commit.Status.Tenants = run.sortedResults()
	if quick {
		run.putSoon()
	} else {
		run.put()
	}
}

// record stores one tenant's result; the last one finishes the commit.
func (run *CommitRun) record(res *schema.TenantResult) {
	run.mu.Lock()
	run.results[res.Tenant] = res
	run.outstanding--
	if res.OutputTail != "" || res.Phase == schema.CommitFailed {
		run.quiet(false)
	}
	last := run.outstanding == 0
	if !last {
		run.commit.Status.Tenants = run.sortedResults()
		if res.OutputTail == "" && res.Phase == schema.CommitSucceeded {
			run.putSoon()
		} else {
			run.put()
		}
	}
	run.mu.Unlock()
	if last {
		run.finish()
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
	c := run.commit
	c.Status.Tenants = run.sortedResults()
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
	if run.previous != nil && run.previous.Status.Phase == c.Status.Phase {
		// Nothing ran: the earlier record still tells what this revision did.
		run.commit = run.previous
	} else {
		run.r.putCommit(c)
	}
	close(run.done)
}

// tenantJob applies (desired set) or destroys (desired nil) one tenant for
// one revision.
type tenantJob struct {
	run     *CommitRun
	tenant  string
	desired *schema.TenantDesired
}

func (j *tenantJob) Run(ctx context.Context) {
	r := j.run.r
	prev, err := r.appliedRecord(j.tenant)
	// A tenant whose manifests are the ones last applied needs no tofu.
	quick := err == nil && j.desired != nil && prev != nil && prev.InputHash == inputHash(j.desired)
	j.run.started(j.tenant, quick)
	var res *schema.TenantResult
	switch {
	case err != nil:
		res = &schema.TenantResult{Tenant: j.tenant, Phase: schema.CommitFailed, Error: err.Error()}
	case j.desired != nil:
		res = r.applyTenant(ctx, j.run.snap, j.desired, prev)
	case prev == nil:
		res = &schema.TenantResult{Tenant: j.tenant, Phase: schema.CommitSucceeded}
	default:
		res = r.destroyTenant(ctx, j.run.snap, prev)
	}
	result := "succeeded"
	switch {
	case res.Phase == schema.CommitFailed:
		result = "failed"
	case res.OutputTail == "":
		result = "unchanged"
	}
	r.opts.Metrics.Reconciled(result, res.FinishedAt.Sub(res.StartedAt).Seconds())
	if res.Phase == schema.CommitSucceeded {
		if j.desired != nil {
			r.opts.Metrics.Applied(j.tenant, j.run.snap.Revision)
		} else {
			r.opts.Metrics.Applied(j.tenant, "")
		}
	}
	j.run.record(res)
}

func (j *tenantJob) Superseded(by Job) {
	msg := "superseded before it ran"
	if b, ok := by.(*tenantJob); ok {
		msg = "superseded by revision " + b.run.snap.Revision + " before it ran"
	}
	j.run.record(&schema.TenantResult{Tenant: j.tenant, Phase: schema.CommitSuperseded, Error: msg})
}

// load reads and validates the snapshot: schema checks, the provider
// modules' checks, and the Talos machine configs of every tenant whose
// manifests changed since they were applied.
func (r *Reconciler) load(snap sources.Snapshot, applied map[string]*appliedRecord) (*schema.Desired, []schema.Problem) {
	root := snap.Root
	if root == "" {
		root = "."
	}
	desired, err := schema.Load(snap.FS, root, nil)
	var list *schema.ProblemList
	if errors.As(err, &list) {
		return nil, list.Problems
	}
	if err != nil {
		return nil, []schema.Problem{{File: root, Message: err.Error()}}
	}
	if probs := r.modules.Validate(desired); len(probs) > 0 {
		return nil, probs
	}
	var probs []schema.Problem
	for _, td := range desired.Tenants {
		if prev := applied[td.Tenant.Metadata.Name]; prev != nil && prev.InputHash == inputHash(td) {
			continue
		}
		probs = append(probs, render.ValidateTalos(td)...)
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return desired, nil
}

func (r *Reconciler) fail(c *schema.Commit, err error) error {
	c.Status.Phase = schema.CommitFailed
	c.Status.Message = err.Error()
	c.Status.Timings.FinishedAt = r.opts.Now()
	r.putCommit(c)
	return err
}

// allowedDeletions reads the Rezuscloud-Allow-Deletions trailer of a
// commit: a whole number, 0 when absent or not a number. The trailers come
// from the snapshot, which read them from the full message as git does;
// a line elsewhere in the message is no trailer.
func allowedDeletions(trailers commitmsg.Trailers) int {
	v, ok := trailers.Get(TrailerAllowDeletions)
	if !ok || v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

// workDir returns (and creates, 0700) a tenant's work directory.
func (r *Reconciler) workDir(tenant string) (string, error) {
	dir := filepath.Join(r.opts.DataDir, "work", tenant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("work dir %s: %w", tenant, err)
	}
	return dir, nil
}

func (r *Reconciler) creds(tenant string) (Creds, func()) {
	c := Creds{Address: strings.TrimRight(r.opts.StateURL, "/") + "/tfstate/" + tenant}
	if r.opts.Credentials == nil {
		return c, func() {}
	}
	var revoke func()
	c.Username, c.Password, revoke = r.opts.Credentials(tenant)
	return c, revoke
}

// applyTenant renders, diffs and, when anything changed, applies one
// tenant, then projects its state.
func (r *Reconciler) applyTenant(ctx context.Context, snap sources.Snapshot, td *schema.TenantDesired, prev *appliedRecord) *schema.TenantResult {
	name := td.Tenant.Metadata.Name
	res := &schema.TenantResult{Tenant: name, StartedAt: r.opts.Now()}
	defer func() { res.FinishedAt = r.opts.Now() }()
	failf := func(format string, args ...any) *schema.TenantResult {
		res.Phase = schema.CommitFailed
		res.Error = fmt.Sprintf(format, args...)
		r.setTenantMessage(name, res.Error)
		return res
	}

	desired := modeldiff.DesiredModel(td)
	inHash := inputHash(td)
	unchanged := func(renderedHash string) *schema.TenantResult {
		// Nothing for tofu to do; labels, annotations and the observed
		// commit may still have changed.
		machines, err := r.storedMachines(name)
		if err != nil {
			return failf("%v", err)
		}
		rec := *prev
		rec.Revision, rec.Annotations, rec.InputHash = snap.Revision, td.Tenant.Metadata.Annotations, inHash
		if renderedHash != "" {
			rec.RenderedHash = renderedHash
		}
		if err := r.finishTenant(td, &rec, machines); err != nil {
			return failf("%v", err)
		}
		res.Phase = schema.CommitSucceeded
		return res
	}
	rewrite := r.opts.EncryptState && prev != nil && r.plainState(name)
	// A run that was interrupted runs again, whether or not anything changed.
	again := rewrite || r.needsRecovery(name)
	if !again && prev != nil && prev.InputHash == inHash && len(modeldiff.Diff(prev.Model, desired)) == 0 {
		return unchanged("")
	}
	dir, err := r.workDir(name)
	if err != nil {
		return failf("%v", err)
	}
	// Nothing of the tenant runs before an earlier run of it is over.
	if err := r.settle(ctx, name, dir); err != nil {
		return failf("%v", err)
	}
	creds, revoke := r.creds(name)
	defer revoke()
	var initInputs []byte
	if prev != nil {
		initInputs = prev.InitInputs
	}
	bundle, fresh, err := r.secretsFor(ctx, td, dir, initInputs, creds)
	if err != nil {
		return failf("%v", err)
	}
	ws, err := r.modules.Render(td, bundle)
	if err != nil {
		return failf("%v", err)
	}
	if !again && prev != nil && !fresh && prev.RenderedHash == ws.Hash && len(modeldiff.Diff(prev.Model, desired)) == 0 {
		return unchanged(ws.Hash)
	}
	vars, err := ws.VarFile()
	if err != nil {
		return failf("%v", err)
	}
	for fname, b := range ws.Files {
		if err := writeFileAtomic(filepath.Join(dir, fname), b); err != nil {
			return failf("write workspace: %v", err)
		}
	}
	if err := r.putManifests(td, prev == nil); err != nil {
		return failf("%v", err)
	}
	if err := r.resetRemovedMetal(ctx, td, bundle); err != nil {
		return failf("%v", err)
	}
	apply := r.runner.Apply
	if rewrite {
		apply = r.runner.Rewrite
	}
	out, err := apply(ctx, dir, ws.InitInputs, vars, creds)
	if out != nil {
		res.Plan = out.Plan
		res.OutputTail = out.Output
	}
	if err != nil {
		return failf("%v", err)
	}
	if kept := secretsFromShow(out.State); kept != nil {
		r.secrets.put(name, kept)
	}
	machines, err := r.project(name, td, out.State)
	if err != nil {
		return failf("project state: %v", err)
	}
	rec := &appliedRecord{
		Tenant: name, Revision: snap.Revision, InputHash: inHash, RenderedHash: ws.Hash, InitInputs: ws.InitInputs,
		Annotations: td.Tenant.Metadata.Annotations, Model: appliedModel(td, machines),
	}
	if err := r.finishTenant(td, rec, machines); err != nil {
		return failf("%v", err)
	}
	if err := r.configureMetal(ctx, td, ws, bundle, machines); err != nil {
		return failf("%v", err)
	}
	res.Phase = schema.CommitSucceeded
	return res
}

// appliedModel is the desired model with the machine slots that exist.
func appliedModel(td *schema.TenantDesired, machines []*schema.Machine) modeldiff.Model {
	m := modeldiff.DesiredModel(td)
	m.Machines = map[string]modeldiff.MachineSlot{}
	for _, mc := range machines {
		m.Machines[mc.Metadata.Annotations[modeldiff.AnnotationSlot]] = modeldiff.MachineSlot{Role: mc.Spec.Role, Shape: mc.Spec.Shape}
	}
	return m
}

// destroyTenant destroys a tenant removed from git: it gets a
// deletionTimestamp and finalizers, tofu destroys its machines, and the
// records and the current state go. The state's history stays.
func (r *Reconciler) destroyTenant(ctx context.Context, snap sources.Snapshot, prev *appliedRecord) *schema.TenantResult {
	name := prev.Tenant
	res := &schema.TenantResult{Tenant: name, StartedAt: r.opts.Now()}
	defer func() { res.FinishedAt = r.opts.Now() }()
	if err := r.markDeleting(name); err != nil {
		res.Phase, res.Error = schema.CommitFailed, err.Error()
		return res
	}
	dir, err := r.workDir(name)
	if err != nil {
		res.Phase, res.Error = schema.CommitFailed, err.Error()
		return res
	}
	creds, revoke := r.creds(name)
	defer revoke()
	vars, err := placeholderVars(dir)
	if err == nil {
		err = r.settle(ctx, name, dir)
	}
	if err != nil {
		res.Phase, res.Error = schema.CommitFailed, err.Error()
		return res
	}
	out, err := r.runner.Destroy(ctx, dir, prev.InitInputs, vars, creds)
	if out != nil {
		res.Plan = out.Plan
		res.OutputTail = out.Output
	}
	if err != nil {
		res.Phase, res.Error = schema.CommitFailed, err.Error()
		r.setTenantMessage(name, "destroy failed: "+err.Error())
		return res
	}
	if err := r.removeTenant(ctx, name, creds); err != nil {
		res.Phase, res.Error = schema.CommitFailed, err.Error()
		return res
	}
	_ = os.RemoveAll(dir)
	r.secrets.put(name, nil)
	res.Phase = schema.CommitSucceeded
	return res
}

func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// writeFileAtomic writes b to path (mode 0600) unless path holds it
// already, so that tofu sees only real changes.
func writeFileAtomic(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	return atomicfile.Write(path, b, 0o600)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err))
	}
	return b
}
