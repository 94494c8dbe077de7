package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
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

// kindObserved is the store kind of the reconciler's record of the last
// revision of the main ref it received. The API does not serve it.
const kindObserved = "ObservedRevision"

// kindLineage is the store kind of the reconciler's record of the last
// revision of the main ref it applied, and of the last one it refused for
// not descending from it (see ancestry.go). The API does not serve it.
const kindLineage = "Lineage"

// Defaults of Options that are not the queue's.
const (
	DefaultMaxDeletions       = 1
	DefaultKubeconfigValidity = 365 * 24 * time.Hour
)

// Options configure a Reconciler. DataDir and StateURL are required.
type Options struct {
	// DataDir holds the per-tenant work directories under work/, and
	// the manifest cache's file (manifests.db).
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
	// Rezuscloud-Allow-Deletions trailer. Default DefaultMaxDeletions.
	MaxDeletions int
	// Workers is how many tenants run tofu at once. Default DefaultWorkers.
	Workers int
	// Debounce is how long a tenant stays quiet before its newest
	// revision runs; bursts of commits coalesce. Default 0.
	Debounce time.Duration
	// ShutdownGrace is how long Close waits for running tofu processes
	// before it interrupts them with SIGINT. Default DefaultShutdownGrace.
	// Drift checks and backups get at most as long (a minute and ten
	// seconds at most), so that a replica that must stop before its lease
	// ends can bound all of its work with it.
	ShutdownGrace time.Duration
	// RetryBase and RetryMax set the backoff of tenants whose run failed
	// for a passing reason (see Backoff): the first retry comes after
	// about RetryBase, each further one after twice as long, never after
	// more than RetryMax. Defaults DefaultRetryBase and DefaultRetryMax.
	RetryBase, RetryMax time.Duration
	Logger              *slog.Logger
	// OnCommit, when set, is called with a copy of every Commit the
	// reconciler records, as it records it: commit status reporters hang
	// here. It must not block.
	OnCommit func(*schema.Commit)
	// EncryptState says that tofu runs encrypt state (TF_ENCRYPTION is in
	// the runner's environment). A tenant whose stored state is still
	// plain is then applied once even when nothing changed, so that its
	// state gets written encrypted.
	EncryptState bool
	// StatePassphrase is the passphrase of that encryption, with which
	// the plane's observer reads a tenant's secrets from its encrypted
	// state, in memory, before any run has (TalosBundle).
	StatePassphrase string
	// KubeconfigValidity is how long the client certificate of a
	// downloaded kubeconfig is valid. Default DefaultKubeconfigValidity.
	KubeconfigValidity time.Duration
	// Metrics, when set, records each tenant's reconcile and the revision
	// applied to it.
	Metrics *metrics.Metrics
	// Talos, when set, is the Talos plane: it bootstraps each tenant's
	// etcd and rolls changes through its machines after every run that
	// applied them (see plane.go).
	Talos *talos.Plane
	// DisabledClasses maps the provider classes this server does not run
	// to why, as their Stalled message says it: a tenant with a node
	// group of one stalls before anything of it is applied or destroyed
	// (see classes.go).
	DisabledClasses map[string]string
	// Now returns the current time; tests may fix it.
	Now func() time.Time
	// AllowNonFastForward lets through, with signatures verified, a
	// commit that does not descend from the last one applied (see
	// ancestry.go); without it such a commit is refused.
	AllowNonFastForward bool
	// DriftInterval is how often each applied tenant gets a drift check
	// (see drift.go), jittered; 0 turns drift checks off.
	DriftInterval time.Duration
	// DriftWorkers is how many drift checks run at once. Default
	// DefaultDriftWorkers.
	DriftWorkers int
	// Backups, when set, configure the tenants' etcd backups (see
	// backups.go); nil: the server takes none.
	Backups *BackupOptions
	// OnDrift, when set, is called when a drift check changes a tenant's
	// Drifted condition: commit status reporters hang here. It must not
	// block.
	OnDrift func(DriftReport)
	// Decrypt, when set, opens the SOPS-encrypted manifest files of every
	// load: revisions, previews of other refs and uploaded trees. Without
	// it a tree with such a file is refused. See encrypted.go for where
	// decrypted values may go.
	Decrypt schema.Decrypter
	// HashKey keys the input hash of tenants with encrypted values (see
	// inputHash); cmd/rezuscloud derives it from the age key file.
	HashKey []byte
	// Owners, when set, are the replicas among which tenants are spread:
	// a tenant's runs happen on the replica that owns it, under its
	// shard's context (see remote.go). Nil: this server runs every
	// tenant.
	Owners Owners
}

// Reconciler turns snapshots of the repository into applied state.
type Reconciler struct {
	store   store.Store
	runner  *tofu.Runner
	modules render.Modules
	opts    Options
	log     *slog.Logger

	// prepareValidation starts the throwaway bundle the Talos checks
	// need (its keys take milliseconds of CPU): at New on a first start,
	// else at the first load, after the server is ready (a restart
	// validates only the tenants that changed, often none).
	prepareValidation sync.Once

	queue     *Queue
	previews  *Queue
	closeOnce sync.Once
	secrets   secretsCache
	backoff   Backoff
	// ownPool is the Talos client pool of a reconciler without a plane
	// (see talosPool).
	ownPool     *talos.Pool
	ownPoolOnce sync.Once
	// manifests keeps what each manifest file yielded, so that a revision
	// parses and validates only the files it changed.
	manifests *schema.Cache
	// manifestStore keeps the manifest cache across restarts; nil when
	// its file could not be opened.
	manifestStore *manifestStore
	// index holds what the quiet check reads of every tenant's records.
	index  *appliedIndex
	inputs inputHashes
	// checked are the node groups the provider modules found no problem in.
	checked moduleChecks
	drift   *driftState
	backups *backupState // nil when the server takes no backups
	// early are the preempts that reached this replica before their run.
	early earlyPreempts

	mu          sync.Mutex
	lastApplied string // the revision of the last commit that finished without failures
	lastCommit  string
	// runs holds the newest run of each revision while it runs or a
	// retry of one of its tenants is pending.
	runs map[string]*CommitRun
}

// New returns a Reconciler. It records the built-in provider modules as
// Provider resources.
func New(st store.Store, runner *tofu.Runner, modules render.Modules, opts Options) (*Reconciler, error) {
	if opts.DataDir == "" || opts.StateURL == "" {
		return nil, errors.New("reconciler: DataDir and StateURL are required")
	}
	if opts.MaxDeletions <= 0 {
		opts.MaxDeletions = DefaultMaxDeletions
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = DefaultRetryBase
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	opts.RetryMax = max(opts.RetryMax, opts.RetryBase)
	opts.KubeconfigValidity = defaultValidity(opts.KubeconfigValidity)
	r := &Reconciler{store: st, runner: runner, modules: modules, opts: opts, log: opts.Logger,
		backoff: newBackoff(opts.RetryBase, opts.RetryMax), runs: map[string]*CommitRun{}, manifests: schema.NewCache(0),
		queue: NewQueue(QueueOptions{Workers: opts.Workers, Debounce: opts.Debounce, Grace: opts.ShutdownGrace})}
	idx, err := openIndex(st)
	if err != nil {
		return nil, err
	}
	r.index = idx
	if len(idx.applied) == 0 {
		// A first start validates every tenant at its first load.
		r.prepareValidation.Do(render.PrepareValidation)
	}
	if ms, err := openManifestStore(opts.DataDir); err != nil {
		r.log.Warn("the manifest cache is not kept across restarts", "err", err)
	} else {
		r.manifestStore = ms
		r.manifests.UseStore(ms)
	}
	r.queue.Start()
	// Previews have a worker of their own, so they never hold up applies;
	// they plan without the state lock, so they never block one either.
	r.previews = NewQueue(QueueOptions{Workers: 1, Grace: time.Minute})
	r.previews.Start()
	r.drift = newDriftState(r)
	r.backups = newBackupState(r, opts.Backups)
	if opts.Owners != nil {
		go r.wakeOnShards()
	}
	if err := r.putProviders(); err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops the queue: pending runs are superseded, running ones get
// ShutdownGrace to finish before tofu is interrupted. Calls after the
// first do nothing.
func (r *Reconciler) Close() { r.closeOnce.Do(r.close) }

func (r *Reconciler) close() {
	r.backups.close()
	r.drift.close()
	r.previews.Stop()
	r.queue.Stop()
	r.index.stop()
	r.closeTalosPool()
	if r.manifestStore != nil {
		_ = r.manifestStore.Close()
	}
}

// Queue returns the apply queue.
func (r *Reconciler) Queue() *Queue { return r.queue }

// LastObserved returns the last revision of the main ref the reconciler
// received, also from before a restart; "" when none.
func (r *Reconciler) LastObserved() string {
	var rev string
	_ = r.store.View(func(tx store.Tx) error {
		if res, err := tx.Get(kindObserved, "main"); err == nil {
			_ = json.Unmarshal(res.Object, &rev)
		}
		return nil
	})
	return rev
}

// Runner returns the tofu runner, whose counter tells how many tofu
// processes ran.
func (r *Reconciler) Runner() *tofu.Runner { return r.runner }

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

// Reconcile runs one revision through its steps (revisionSteps, then
// applySteps or destroySteps for each tenant) and waits until every tenant
// it touches has finished or been superseded by a newer revision. A tenant
// that is retried later amends the revision's Commit.
func (r *Reconciler) Reconcile(ctx context.Context, snap sources.Snapshot) (*schema.Commit, error) {
	run := r.Submit(snap)
	select {
	case <-run.Done():
		return run.Commit(), nil
	case <-ctx.Done():
		return run.Commit(), ctx.Err()
	}
}

// load reads and validates the snapshot: schema checks (of the files the
// manifest cache does not hold), the provider modules' checks, and the
// Talos machine configs of every tenant whose manifests changed since they
// were applied. It returns the inputHash of every tenant.
func (r *Reconciler) load(snap sources.Snapshot, applied map[string]*appliedRecord) (*schema.Desired, map[string]string, []schema.Problem) {
	r.prepareValidation.Do(render.PrepareValidation)
	root := snap.Root
	if root == "" {
		root = "."
	}
	desired, err := schema.Load(snap.FS, root, &schema.Options{Cache: r.manifests, Decrypt: r.opts.Decrypt})
	var list *schema.ProblemList
	if errors.As(err, &list) {
		return nil, nil, list.Problems
	}
	if err != nil {
		return nil, nil, []schema.Problem{{File: root, Message: err.Error()}}
	}
	if probs := checkEncrypted(desired, root); len(probs) > 0 {
		return nil, nil, probs
	}
	if probs := r.checked.validate(r.modules, desired); len(probs) > 0 {
		return nil, nil, probs
	}
	hashes := r.inputs.of(desired, r.opts.HashKey)
	var changed []*schema.TenantDesired
	for _, td := range desired.Tenants {
		if prev := applied[td.Tenant.Metadata.Name]; prev == nil || prev.InputHash != hashes[td.Tenant.Metadata.Name] {
			changed = append(changed, td)
		}
	}
	if probs := validateTalos(changed); len(probs) > 0 {
		return nil, nil, probs
	}
	return desired, hashes, nil
}

// validateTalos renders the Talos configs of tenants, on every core, and
// returns their problems in the order of tenants.
func validateTalos(tenants []*schema.TenantDesired) []schema.Problem {
	found := make([][]schema.Problem, len(tenants))
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(runtime.GOMAXPROCS(0), len(tenants)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(tenants); i = int(next.Add(1) - 1) {
				found[i] = scrubProblems(tenants[i], render.ValidateTalos(tenants[i]))
			}
		})
	}
	wg.Wait()
	return slices.Concat(found...)
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

func (r *Reconciler) creds(tenant string) (tofu.Creds, func()) {
	c := tofu.Creds{Address: strings.TrimRight(r.opts.StateURL, "/") + "/tfstate/" + tenant}
	c.Secrets = r.secrets.values(tenant)
	if r.opts.Credentials == nil {
		return c, func() {}
	}
	var revoke func()
	c.Username, c.Password, revoke = r.opts.Credentials(tenant)
	return c, revoke
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
