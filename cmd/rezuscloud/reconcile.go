package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/backend/webhook"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// tofuVersion is the OpenTofu release `make tools` builds and caches.
const tofuVersion = "v1.10.10"

// reconcilerPart is what a Main with a source runs beside the server: the
// reconciler with its tofu runner, the source that feeds it, the previews
// of other refs, the commit status reports, the Talos plane and its
// observer, and with --sim-cloud the simulated cloud's Talos nodes
// (simDir is the sim dir of --sim-cloud or --sim-world, "" without).
type reconcilerPart struct {
	m               *Main
	f               *serveFlags
	log             *slog.Logger
	dataDir, simDir string
	tofuBin         string
	encrypt         bool
	passphrase      string
	decrypt         schema.Decrypter // the age identities of --sops-age-key-file; nil without
	hashKey         []byte
	audit           *slog.Logger
	metrics         *metrics.Metrics
	runner          *tofu.Runner
	auth            sources.Auth
	onCommit        func(*schema.Commit)
	startup         *startupDone
	onDrift         func(reconciler.DriftReport)
	closeReports    func()
	plane           *talos.Plane
	nodes           *talosnode.Host // nil without --sim-cloud, also with --sim-world
	rec             *reconciler.Reconciler
	previews        *sources.Previews
	now             func() time.Time // the test clock (testclock.go); nil: the real one
}

// openReconciler builds the reconciler's part, when there is a source, in
// these stages. A replica builds it from the start too, since it runs the
// runs of the tenants it owns (owners.go), but mounts its API and runs its
// source only once it leads (lead).
func (m *Main) openReconciler() error {
	if m.src == nil {
		return nil
	}
	p := &reconcilerPart{m: m, f: m.flags, log: m.log}
	stages := []func() error{p.openDirs, p.openSimCloud, p.openPlane, p.openTofu, p.openSOPS, p.openReports, p.openReconciler, p.countRuns, p.mount}
	if m.replica != nil {
		stages = append(stages[:len(stages)-1], p.serveRuns)
	}
	for _, open := range stages {
		if err := open(); err != nil {
			return err
		}
	}
	m.recMu.Lock()
	m.rec = p
	m.recMu.Unlock()
	return nil
}

// openDirs finds the data dir, the test clock and the audit log.
func (p *reconcilerPart) openDirs() (err error) {
	if p.dataDir, err = filepath.Abs(p.f.data); err != nil {
		return err
	}
	if p.now, err = testClock(p.f.getenv); err != nil {
		return err
	}
	if p.now != nil {
		p.log.Warn("the reconciler and the Talos plane run on a test clock", "env", envTestClock, "now", p.now())
	}
	p.audit = p.m.audit
	return nil
}

// openTofu sets up how tofu runs: the binary, the CLI configuration of
// the provider mirror, the environment every run gets (never argv), state
// encryption, and the metrics of its commands.
func (p *reconcilerPart) openTofu() error {
	getenv := p.f.getenv
	var err error
	if p.tofuBin, err = findTofu(p.f.tofu, getenv); err != nil {
		return err
	}
	mirror, err := findMirror(p.f.providerMirror)
	if err != nil {
		return err
	}
	cli := filepath.Join(p.dataDir, "tofu.rc")
	// No shared plugin cache: concurrent first inits of several tenants
	// race on it (tofu then fails to exec the provider). Each work dir
	// takes its providers from the mirror instead, which is as fast.
	if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: mirror}); err != nil {
		return err
	}
	env := map[string]string{}
	if p.simDir != "" {
		env["REZUSSIM_DIR"] = p.simDir
		// A knob of the simulated cloud for tests: how long creating a
		// machine takes.
		if d := getenv(simCreateDelay); d != "" {
			env[simCreateDelay] = d
		}
	}
	cl, err := setupClouds(&p.f.clouds, p.dataDir, getenv, p.nodes, p.log)
	if err != nil {
		return err
	}
	// The simulated OpenStack stops after the reconciler, whose runs
	// may still talk to it while they finish.
	p.m.onClose(cl.close)
	for k, v := range cl.env {
		env[k] = v
	}
	encrypt, err := stateEncryption(p.f.stateEncryption, getenv(envStatePassphrase))
	if err != nil {
		return err
	}
	if encrypt != "" {
		env["TF_ENCRYPTION"] = encrypt
		p.encrypt, p.passphrase = true, getenv(envStatePassphrase)
	}
	if p.metrics = p.m.metrics; p.metrics == nil {
		p.metrics = metrics.New()
	}
	opts := tofu.Options{Binary: p.tofuBin, CLIConfigFile: cli, Env: env, Metrics: p.metrics, Getenv: getenv,
		MaxStateBytes: p.f.stateMaxBytes, InterruptOnDeath: p.m.replica != nil}
	if r := p.m.replica; r != nil {
		// A replica paused past its lease, or dead, cannot interrupt its
		// applies itself: the guard does, when the lease was not renewed.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the tofu guard runs this server's binary, whose path does not read: %w", err)
		}
		opts.Guard, opts.ActUntil = []string{exe, tofu.GuardCommand}, r.ActUntil
	}
	p.runner, err = tofu.NewRunner(opts)
	return err
}

// openPlane builds the Talos plane that bootstraps, rolls and observes
// every tenant's machines through their Talos API; a replica's reconciler
// works through the replica's plane (openObserver).
func (p *reconcilerPart) openPlane() (err error) {
	if p.plane = p.m.plane; p.plane != nil {
		return nil
	}
	p.plane, err = p.m.openPlane(p.now)
	return err
}

// openReports builds the commit status reporters of --report, and the
// git credentials they and the previews share.
func (p *reconcilerPart) openReports() (err error) {
	if p.f.repo != "" {
		if p.auth, err = sources.AuthFrom(p.f.getenv); err != nil {
			return err
		}
	}
	var closeReports func()
	p.onCommit, closeReports, err = newReports(p.f, p.f.repo, p.dataDir, p.m.Server.URL(), p.auth, p.log, p)
	if err != nil {
		return err
	}
	p.closeReports = sync.OnceFunc(closeReports)
	p.m.onClose(p.closeReports)
	return nil
}

// openReconciler builds the reconciler, and clears what runs of an earlier
// process left (their locks, var files and plans) before any run.
func (p *reconcilerPart) openReconciler() (err error) {
	f, srv := p.f, p.m.Server
	tokens := srv.Tokens()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	backups, err := backupOptions(ctx, &f.backups, p.dataDir, f.getenv(envStatePassphrase), p.log)
	if err != nil {
		return err
	}
	p.rec, err = reconciler.New(srv.Store(), p.runner, providerModules(f), reconciler.Options{
		DataDir:             p.dataDir,
		StateURL:            f.stateURL(srv.URL()),
		MaxDeletions:        f.maxDeletions,
		AllowNonFastForward: f.allowNonFastForward,
		Workers:             f.workers,
		Debounce:            f.debounce,
		ShutdownGrace:       f.stopGrace(),
		RetryBase:           f.retryBase,
		RetryMax:            f.retryMax,
		Metrics:             p.metrics,
		EncryptState:        p.encrypt,
		StatePassphrase:     p.passphrase,
		OnCommit:            p.startupCommits(),
		OnDrift:             p.onDrift,
		DriftInterval:       f.driftInterval,
		Backups:             backups,
		KubeconfigValidity:  f.kubeconfigValid,
		Logger:              p.log.With("component", "reconciler"),
		Credentials: func(tenant string) (string, string, func()) {
			name := runToken(tenant)
			secret, revoke := tokens.Ephemeral(name, backend.RoleEdit)
			return name, secret, revoke
		},
		LockHolder:      runToken,
		Audit:           p.audit,
		Talos:           p.plane,
		DisabledClasses: p.disabledClasses(),
		Now:             p.now,
		Decrypt:         p.decrypt,
		HashKey:         p.hashKey,
		Owners:          p.m.owners(),
	})
	if err != nil {
		return err
	}
	p.m.onClose(p.rec.Close)
	p.rec.Recover()
	return nil
}

// providerModules are the built-in provider modules as the settings ask:
// bare-metal machines at loopback addresses only with
// --allow-loopback-metal.
func providerModules(f *serveFlags) render.Modules {
	return render.BuiltinWith(render.Options{AllowLoopbackMetal: f.allowLoopbackMetal})
}

// The reconciler implements the ports the API calls, declared in backend;
// the reconciler does not import backend, so they are checked here.
var (
	_ backend.TenantSecrets = (*reconciler.Reconciler)(nil)
	_ backend.MachineLogs   = (*reconciler.Reconciler)(nil)
	_ backend.Previewer     = (*reconciler.Reconciler)(nil)
	_ backend.Reconcile     = reconciler.ReconcileRequests{}
)

// countRuns registers the metrics of the tenants' runs, which every
// replica has.
func (p *reconcilerPart) countRuns() error {
	m, rec := p.metrics, p.rec
	m.GaugeFunc("rezuscloud_queue_depth", "Tenant runs waiting for a worker.", func() float64 { return float64(rec.Queue().Depth()) })
	m.GaugeFunc("rezuscloud_queue_running", "Tenant runs in progress (on a leader, also those handed to the replica that owns the tenant).", func() float64 { return float64(rec.Queue().Running()) })
	m.CounterFunc("rezuscloud_tofu_processes_total", "tofu processes started.", func() float64 { return float64(p.runner.Runs()) })
	return nil
}

// mount puts the reconciler's parts into the server: its status and
// readiness, metrics, downloads of tenant secrets, previews and webhooks.
func (p *reconcilerPart) mount() (err error) {
	srv, src, rec, m := p.m.Server, p.m.src, p.rec, p.metrics
	if p.m.metrics == nil { // a replica serves its metrics from the start
		srv.Handle("GET /metrics", backend.RequireRole(backend.RoleView, "reading metrics", m.Handler()))
	}
	srv.SetStatus(func(st *api.Status) {
		source, reconciler := api.SourceStatus(src.Status()), rec.Status()
		st.Source, st.Reconciler = &source, &reconciler
	})
	srv.AddReadyCheck("source", func(context.Context) error { return src.Status().Ready() })
	m.CounterFunc("rezuscloud_source_fetch_errors_total", "Polls of the repository that failed.", func() float64 { return float64(src.Status().Errors) })
	m.GaugeFunc("rezuscloud_watch_subscribers", "Open watch streams.", func() float64 { return float64(srv.WatchSubscribers()) })
	m.CounterFunc("rezuscloud_watch_cutoffs_total", "Watch streams cut off for not keeping up.", func() float64 { return float64(srv.Hub().CutOffs()) })
	if p.m.plane == nil { // a replica counts its plane's from the start
		planeMetrics(m, p.plane)
	}
	srv.ServeTenantSecrets(rec, p.audit)
	srv.ServeMachineLogs(rec, p.audit)
	srv.ServePreviews(rec)
	srv.ServeReconcile(rec.Requests(src.Trigger))
	if rec.TakesBackups() {
		srv.ServeBackups(rec, p.audit)
	}
	if p.previews, err = newPreviews(p.f, p.dataDir, p.auth, p.log); err != nil {
		return err
	}
	hooks := func(h http.Handler) { srv.HandleUnauthenticated(webhook.Prefix, h) }
	if p.m.hooks != nil { // a replica that leads serves its own from now on
		hooks = p.m.hooks.Set
	}
	if err := mountWebhooks(hooks, src, p.previews, p.m.origin, p.f, m, p.log); err != nil {
		return err
	}
	o := p.m.origin
	p.log.Info("reconciling", "source", o.Repo, "ref", o.Ref, "path", o.Path, "tofu", p.tofuBin)
	return nil
}

// start runs the source, the reconciler, the previews and the observer
// until ctx ends; the returned function waits until they have stopped, the
// reconciler after giving running tofu processes its grace period.
func (p *reconcilerPart) start(ctx context.Context) (wait func()) {
	if p.startup == nil { // the reconciler's options made none
		p.startup = newStartupDone()
	}
	var wg sync.WaitGroup
	goRun := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	snaps := make(chan sources.Snapshot)
	goRun(func() {
		if err := p.m.src.Run(ctx, snaps); err != nil && ctx.Err() == nil {
			p.log.Error("source stopped", "err", err)
		}
	})
	goRun(func() {
		p.rec.Run(ctx, snaps)
		p.closeReports()
	})
	if p.m.replica != nil {
		// The replica observes the machines of the tenants it owns
		// (observe.go).
		p.startup.observedOnce()
	} else {
		goRun(func() { p.observe(ctx) })
	}
	goRun(func() { p.runHistory(ctx) })
	p.m.runNotifications(ctx, goRun)
	if mapped, ok := p.m.Server.Store().(*bolt.Store); ok {
		goRun(func() { releaseMemory(ctx, mapped, p.startup.done, mappedRelease, p.log) })
	}
	if p.previews != nil {
		ups := make(chan sources.PreviewUpdate)
		goRun(func() { p.previews.Run(ctx, p.f.pollInterval, ups) })
		goRun(func() { p.handlePreviews(ctx, ups) })
	}
	return wg.Wait
}

// observe runs the observer of a server alone, over every tenant, until
// ctx ends.
func (p *reconcilerPart) observe(ctx context.Context) {
	// A machine probed before its simulated node has booted would be
	// recorded as disconnected until the next pass.
	if p.nodes != nil {
		select {
		case <-p.nodes.Booted():
		case <-ctx.Done():
			return
		}
	}
	p.plane.RunObserver(ctx, talos.ObserverOptions{Bundle: p.rec.TalosBundle, OnMaintenance: p.rec.MetalWaiting,
		AfterFirstPass: p.startup.observedOnce, Watch: p.f.history.talosWatch, MaxWatched: p.f.history.talosWatchMax,
		OnSamples:      reconciler.HistorySamples(p.m.Server.Store(), p.now, p.log.With("component", "history")),
		SampleInterval: p.f.history.sampleInterval})
}

// startupCommits is the reconciler's OnCommit: the reports', and the end
// of start-up at the first finished commit (releaseMemory).
func (p *reconcilerPart) startupCommits() func(*schema.Commit) {
	if p.startup == nil {
		p.startup = newStartupDone()
	}
	return p.startup.onCommit(p.onCommit)
}

// mappedRelease is how often the server releases the store's mapped
// pages after start-up.
const mappedRelease = time.Minute

// releaseMemory returns what only start-up needed, once start-up is over
// (done): the pages of the store's file that its reads mapped (every
// tenant's state, read for its secrets bundle, and what the first commit
// read) and the Go heap's free memory that the start-up load left. After
// that it releases the store's mapped pages every interval, so that the
// server's resident memory holds only the pages of the store read since:
// a read maps the pages around the one it needs that the page cache has
// (the kernel's fault-around), and after a while that is much of a file
// that start-up read whole.
func releaseMemory(ctx context.Context, store interface{ ReleaseMapped() error }, done <-chan struct{}, interval time.Duration, log *slog.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-done:
	}
	if err := store.ReleaseMapped(); err != nil {
		log.Warn("release the store's pages read at start-up", "err", err)
	}
	debug.FreeOSMemory()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := store.ReleaseMapped(); err != nil {
				log.Warn("release the store's mapped pages", "err", err)
			}
		}
	}
}

// handlePreviews hands the previews' updates to the reconciler.
func (p *reconcilerPart) handlePreviews(ctx context.Context, ups <-chan sources.PreviewUpdate) {
	for {
		select {
		case <-ctx.Done():
			return
		case up := <-ups:
			for _, ref := range up.Gone {
				p.rec.ForgetPreview(ref)
			}
			for _, snap := range up.Snapshots {
				p.rec.SubmitPreview(snap)
			}
		}
	}
}

// runToken names the ephemeral token of a tenant's runs, which is also
// the holder that the locks of those runs record.
func runToken(tenant string) string { return "reconciler-" + tenant }

// envStatePassphrase holds the passphrase of state encryption.
const envStatePassphrase = "REZUSCLOUD_STATE_PASSPHRASE"

// stateEncryption returns the TF_ENCRYPTION configuration that --state-encryption
// and the passphrase ask for, or "" for none.
func stateEncryption(mode, passphrase string) (string, error) {
	switch mode {
	case "off":
		return "", nil
	case "auto", "":
		if passphrase == "" {
			return "", nil
		}
		return tofu.EncryptionConfig(passphrase, false)
	case "migrate":
		if passphrase == "" {
			return "", errors.New("--state-encryption=migrate needs REZUSCLOUD_STATE_PASSPHRASE")
		}
		return tofu.EncryptionConfig(passphrase, true)
	}
	return "", fmt.Errorf("--state-encryption %q: want auto, migrate or off", mode)
}

// openAudit returns the audit log: JSON lines appended to audit.log in the
// data dir (mode 0600), one per download of a tenant's credentials or of
// a copy of the store, per access to a machine's logs and per
// force-unlock of a state.
func openAudit(dataDir string) (*slog.Logger, error) {
	f, err := os.OpenFile(filepath.Join(dataDir, "audit.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return slog.New(slog.NewJSONHandler(f, nil)), nil
}

// newPreviews builds the watcher of --preview-refs, or nil without them.
func newPreviews(f *serveFlags, dataDir string, auth sources.Auth, log *slog.Logger) (*sources.Previews, error) {
	if strings.TrimSpace(f.previewRefs) == "" {
		return nil, nil
	}
	if f.repo == "" {
		return nil, errors.New("--preview-refs needs --repo")
	}
	verifier, err := signatureVerifier(f)
	if err != nil {
		return nil, err
	}
	var patterns []string
	for _, p := range strings.Split(f.previewRefs, ",") {
		if p = strings.TrimSpace(p); p != "" {
			patterns = append(patterns, p)
		}
	}
	return sources.NewPreviews(sources.PreviewOptions{
		Git: sources.GitOptions{
			URL: f.repo, Branch: f.branch, Tag: f.tag, Path: f.path, Dir: dataDir,
			PollInterval: f.pollInterval, Auth: auth, Logger: log, Verifier: verifier,
		},
		Patterns: patterns,
	})
}

// mountWebhooks serves the push webhooks with mount: they trigger an
// immediate poll of a git source when they name the followed repository
// and ref.
func mountWebhooks(mount func(http.Handler), src sources.Source, previews *sources.Previews, origin backend.Origin, f *serveFlags, m *metrics.Metrics, log *slog.Logger) error {
	secret, err := webhook.SecretFrom(f.webhookSecretFile, f.getenv)
	if err != nil && !errors.Is(err, webhook.ErrNoSecret) {
		return err
	}
	want := webhook.NormalizeRepoURL(origin.Repo)
	trigger := webhook.TriggerFunc(func(repoURL, ref string) bool {
		if repoURL != "" && webhook.NormalizeRepoURL(repoURL) != want {
			return false
		}
		if ref != "" && origin.Ref != "" && ref != origin.Ref && "refs/heads/"+ref != origin.Ref && "refs/tags/"+ref != origin.Ref {
			if previews != nil && previews.Matches(ref) {
				previews.Trigger()
				return true
			}
			return false
		}
		src.Trigger()
		return true
	})
	h, err := webhook.New(webhook.Options{Secret: secret, Trigger: trigger, Observe: m.Webhook, Logger: log.With("component", "webhook")})
	if err != nil {
		return err
	}
	mount(h)
	return nil
}

// newSource builds the git or directory source that --repo or --dir ask
// for, and says where operators change what it reads. Without either it
// returns no source.
func newSource(f *serveFlags, log *slog.Logger) (sources.Source, backend.Origin, error) {
	verifier, err := signatureVerifier(f)
	if err != nil {
		return nil, backend.Origin{}, err
	}
	if f.repo == "" && f.dir == "" {
		if f.branch != "" || f.tag != "" || f.commit != "" || f.path != "" {
			return nil, backend.Origin{}, errors.New("--branch, --tag, --commit and --path need --repo")
		}
		return nil, backend.Origin{}, nil
	}
	if f.repo != "" && f.dir != "" {
		return nil, backend.Origin{}, errors.New("give --repo or --dir, not both")
	}
	if f.dir != "" {
		d, err := sources.NewDir(sources.DirOptions{Path: f.dir, Logger: log.With("component", "source")})
		if err != nil {
			return nil, backend.Origin{}, err
		}
		abs, err := filepath.Abs(f.dir)
		if err != nil {
			return nil, backend.Origin{}, err
		}
		return d, backend.Origin{Repo: abs, Path: "."}, nil
	}
	auth, err := sources.AuthFrom(f.getenv)
	if err != nil {
		return nil, backend.Origin{}, err
	}
	g, err := sources.NewGit(sources.GitOptions{
		URL: f.repo, Branch: f.branch, Tag: f.tag, Commit: f.commit, Path: f.path,
		Dir: f.data, PollInterval: f.pollInterval, Auth: auth, Verifier: verifier,
		Logger: log.With("component", "source"),
	})
	if err != nil {
		return nil, backend.Origin{}, err
	}
	ref := "refs/heads/main"
	switch {
	case f.commit != "":
		ref = f.commit
	case f.tag != "":
		ref = "refs/tags/" + f.tag
	case f.branch != "":
		ref = "refs/heads/" + f.branch
	}
	path := f.path
	if path == "" {
		path = "."
	}
	return g, backend.Origin{Repo: g.Status().URL, Ref: ref, Path: path}, nil
}

// findTofu returns the tofu binary: the one configured, else tofu on PATH,
// else the build that `make tools` caches.
func findTofu(configured string, getenv func(string) string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("--tofu: %w", err)
		}
		return configured, nil
	}
	if p, err := exec.LookPath("tofu"); err == nil {
		return p, nil
	}
	cache := getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(getenv("HOME"), ".cache")
	}
	p := filepath.Join(cache, "rezuscloud", "tofu-"+tofuVersion)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no tofu binary: install OpenTofu >= 1.10, give --tofu, or run `make tools` (it builds %s into %s)", tofuVersion, filepath.Dir(p))
}

// findMirror returns the provider mirror: the one configured, else
// providers/ beside the executable, where `make build` installs it.
func findMirror(configured string) (string, error) {
	dir := configured
	if dir == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(filepath.Dir(exe), "providers")
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("provider mirror: %w (run `make build`, or give --provider-mirror)", err)
	}
	return filepath.Abs(dir)
}
