package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/sources"
)

// tofuVersion is the OpenTofu release `make tools` builds and caches.
const tofuVersion = "v1.10.10"

// startReconciler builds the reconciler for src and starts both. The
// returned function waits until both have stopped after ctx ends; the
// reconciler gives running tofu processes its grace period first. With no
// source it starts nothing.
func startReconciler(ctx context.Context, srv *backend.Server, src sources.Source, origin backend.Origin, f *serveFlags, log *slog.Logger) (wait func(), err error) {
	noop := func() {}
	if src == nil {
		return noop, nil
	}
	tofu, err := findTofu(f.tofu)
	if err != nil {
		return noop, err
	}
	mirror, err := findMirror(f.providerMirror)
	if err != nil {
		return noop, err
	}
	dataDir, err := filepath.Abs(f.data)
	if err != nil {
		return noop, err
	}
	simDir := f.simDir
	if simDir == "" {
		simDir = defaultSimDir(dataDir)
	}
	cli := filepath.Join(dataDir, "tofu.rc")
	// No shared plugin cache: concurrent first inits of several tenants
	// race on it (tofu then fails to exec the provider). Each work dir
	// takes its providers from the mirror instead, which is as fast.
	if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: mirror}); err != nil {
		return noop, err
	}
	// The sim cloud's machines are simulated Talos nodes, served from here.
	nodes, err := talosnode.Open(talosnode.Options{Dir: simDir, Logger: log.With("component", "simnodes")})
	if err != nil {
		return noop, fmt.Errorf("simulated Talos nodes: %w", err)
	}
	stopNodes := sync.OnceFunc(func() { nodes.Close() })
	defer func() {
		if err != nil {
			stopNodes()
		}
	}()
	env := map[string]string{"REZUSSIM_DIR": simDir}
	// A knob of the simulated cloud for tests: how long creating a
	// machine takes.
	if d := os.Getenv(simCreateDelay); d != "" {
		env[simCreateDelay] = d
	}
	cl, err := setupClouds(&f.clouds, dataDir, nodes, log)
	if err != nil {
		return noop, err
	}
	for k, v := range cl.env {
		env[k] = v
	}
	started := false
	defer func() {
		if !started {
			cl.close()
		}
	}()
	encrypt, err := stateEncryption(f.stateEncryption, os.Getenv("REZUSCLOUD_STATE_PASSPHRASE"))
	if err != nil {
		return noop, err
	}
	if encrypt != "" {
		env["TF_ENCRYPTION"] = encrypt
	}
	audit, err := openAudit(dataDir)
	if err != nil {
		return noop, err
	}
	m := metrics.New()
	srv.Handle("GET /metrics", backend.RequireRole(backend.RoleView, "reading metrics", m.Handler()))
	runner, err := reconciler.NewRunner(reconciler.TofuOptions{
		Binary:        tofu,
		CLIConfigFile: cli,
		Env:           env,
		Metrics:       m,
	})
	if err != nil {
		return noop, err
	}
	var auth sources.Auth
	if f.repo != "" {
		if auth, err = sources.AuthFromEnv(); err != nil {
			return noop, err
		}
	}
	onCommit, closeReports, err := newReports(f, f.repo, dataDir, srv.URL(), auth, log)
	if err != nil {
		return noop, err
	}
	tokens := srv.Tokens()
	rec, err := reconciler.New(srv.Store(), runner, render.Builtin(), reconciler.Options{
		DataDir:            dataDir,
		StateURL:           srv.URL(),
		MaxDeletions:       f.maxDeletions,
		Workers:            f.workers,
		Debounce:           f.debounce,
		ShutdownGrace:      f.shutdownGrace,
		Metrics:            m,
		EncryptState:       encrypt != "",
		OnCommit:           onCommit,
		KubeconfigValidity: f.kubeconfigValid,
		Logger:             log.With("component", "reconciler"),
		Credentials: func(tenant string) (string, string, func()) {
			name := runToken(tenant)
			secret, revoke := tokens.Ephemeral(name, backend.RoleEdit)
			return name, secret, revoke
		},
		LockHolder: runToken,
		Audit:      audit,
	})
	if err != nil {
		return noop, err
	}
	// Before any run: what runs of an earlier process left (their locks,
	// var files and plans) goes.
	rec.Recover()
	srv.SetStatus(func(st *api.Status) {
		source, reconciler := api.SourceStatus(src.Status()), rec.Status()
		st.Source, st.Reconciler = &source, &reconciler
	})
	srv.AddReadyCheck("source", func(context.Context) error { return src.Status().Ready() })
	m.GaugeFunc("rezuscloud_queue_depth", "Tenant runs waiting for a worker.", func() float64 { return float64(rec.Queue().Depth()) })
	m.GaugeFunc("rezuscloud_queue_running", "Tenant runs in progress.", func() float64 { return float64(rec.Queue().Running()) })
	m.CounterFunc("rezuscloud_source_fetch_errors_total", "Polls of the repository that failed.", func() float64 { return float64(src.Status().Errors) })
	m.GaugeFunc("rezuscloud_watch_subscribers", "Open watch streams.", func() float64 { return float64(srv.WatchSubscribers()) })
	m.CounterFunc("rezuscloud_watch_cutoffs_total", "Watch streams cut off for not keeping up.", func() float64 { return float64(srv.Hub().CutOffs()) })
	m.CounterFunc("rezuscloud_tofu_processes_total", "tofu processes started.", func() float64 { return float64(runner.Runs()) })
	srv.SetAudit(audit)
	srv.ServeTenantSecrets(rec, audit)
	srv.ServeMachineLogs(rec, audit)
	srv.ServePreviews(rec)
	previews, err := newPreviews(f, dataDir, auth, log)
	if err != nil {
		return noop, err
	}
	if err := mountWebhooks(srv, src, previews, origin, f, m, log); err != nil {
		return noop, err
	}
	log.Info("reconciling", "source", origin.Repo, "ref", origin.Ref, "path", origin.Path, "tofu", tofu)

	if g, ok := src.(*sources.Git); ok {
		if err := g.SetLastObserved(rec.LastObserved()); err != nil {
			log.Warn("last observed revision", "err", err)
		}
	}
	snaps := make(chan sources.Snapshot)
	var wg sync.WaitGroup
	if previews != nil {
		ups := make(chan sources.PreviewUpdate)
		wg.Add(2)
		go func() {
			defer wg.Done()
			previews.Run(ctx, f.pollInterval, ups)
		}()
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case up := <-ups:
					for _, ref := range up.Gone {
						rec.ForgetPreview(ref)
					}
					for _, snap := range up.Snapshots {
						rec.SubmitPreview(snap)
					}
				}
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := src.Run(ctx, snaps); err != nil && ctx.Err() == nil {
			log.Error("source stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		rec.Run(ctx, snaps)
		closeReports()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		rec.ObserveSim(ctx, simDir, 2*time.Second)
		stopNodes()
	}()
	started = true
	return func() {
		wg.Wait()
		cl.close()
	}, nil
}

// defaultSimDir is where the simulated cloud lives without --sim-dir: a
// sibling of the data dir, "<data>-sim". The simulated cloud is another
// party than RezusCloud: its machines' disks hold their Talos configs, as a
// real machine's disk does, and must not rest inside RezusCloud's data dir.
func defaultSimDir(dataDir string) string {
	return filepath.Clean(dataDir) + "-sim"
}

// runToken names the ephemeral token of a tenant's runs, which is also
// the holder that the locks of those runs record.
func runToken(tenant string) string { return "reconciler-" + tenant }

// simCreateDelay is the sim provider's variable for a delay of every
// machine creation.
const simCreateDelay = "REZUSSIM_CREATE_DELAY"

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
		return reconciler.EncryptionConfig(passphrase, false)
	case "migrate":
		if passphrase == "" {
			return "", errors.New("--state-encryption=migrate needs REZUSCLOUD_STATE_PASSPHRASE")
		}
		return reconciler.EncryptionConfig(passphrase, true)
	}
	return "", fmt.Errorf("--state-encryption %q: want auto, migrate or off", mode)
}

// openAudit returns the audit log: JSON lines appended to audit.log in the
// data dir (mode 0600), one per download of a tenant's credentials and
// per access to a machine's logs.
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
	var patterns []string
	for _, p := range strings.Split(f.previewRefs, ",") {
		if p = strings.TrimSpace(p); p != "" {
			patterns = append(patterns, p)
		}
	}
	return sources.NewPreviews(sources.PreviewOptions{
		Git: sources.GitOptions{
			URL: f.repo, Branch: f.branch, Tag: f.tag, Path: f.path, Dir: dataDir,
			PollInterval: f.pollInterval, Auth: auth, Logger: log,
		},
		Patterns: patterns,
	})
}

// mountWebhooks serves the push webhooks, which trigger an immediate poll
// of a git source when they name the followed repository and ref.
func mountWebhooks(srv *backend.Server, src sources.Source, previews *sources.Previews, origin backend.Origin, f *serveFlags, m *metrics.Metrics, log *slog.Logger) error {
	secret, err := webhook.SecretFrom(f.webhookSecretFile, os.Getenv)
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
	srv.HandleUnauthenticated(webhook.Prefix, h)
	return nil
}

// newSource builds the git or directory source that --repo or --dir ask
// for, and says where operators change what it reads. Without either it
// returns no source.
func newSource(f *serveFlags, log *slog.Logger) (sources.Source, backend.Origin, error) {
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
	auth, err := sources.AuthFromEnv()
	if err != nil {
		return nil, backend.Origin{}, err
	}
	g, err := sources.NewGit(sources.GitOptions{
		URL: f.repo, Branch: f.branch, Tag: f.tag, Commit: f.commit, Path: f.path,
		Dir: f.data, PollInterval: f.pollInterval, Auth: auth,
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
func findTofu(configured string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("--tofu: %w", err)
		}
		return configured, nil
	}
	if p, err := exec.LookPath("tofu"); err == nil {
		return p, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
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
