package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/version"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/sources"
)

// serveFlags are the settings of `rezuscloud serve`. Each is a flag, an
// environment variable and a config file key; applyConfig layers them.
type serveFlags struct {
	config          string
	data            string
	listen          string
	tokensFile      string
	usersFile       string
	stateMaxBytes   int64
	stateHistory    int
	staleLockAge    time.Duration
	shutdownTimeout time.Duration
	bodyTimeout     time.Duration
	idleTimeout     time.Duration
	bodyMemory      int64
	logLevel        string
	logFormat       string
	pprofListen     string
	memoryLimit     string

	// store is the engine of the store: engineBolt, in the data dir, or
	// engineEtcd, in the etcd that etcd says.
	store   string
	etcd    etcdFlags
	replica replicaFlags

	// The repository to reconcile: a git remote or a local directory.
	repo         string
	branch       string
	tag          string
	commit       string
	path         string
	pollInterval time.Duration
	dir          string

	// How tofu runs.
	tofu           string
	providerMirror string
	simDir         string
	simKubeBin     string
	maxDeletions   int
	workers        int
	debounce       time.Duration
	shutdownGrace  time.Duration

	// simCloud hosts the simulated cloud's machines in this process, in
	// simDir.
	simCloud bool

	webhookSecretFile string
	stateEncryption   string
	sopsAgeKeyFile    string
	kubeconfigValid   time.Duration

	retryBase time.Duration
	retryMax  time.Duration
	// driftInterval is how often each applied tenant gets a drift check.
	driftInterval time.Duration

	reports     reportFlags
	previewRefs string
	// Signed commits only: --verify-signatures and the trusted keys.
	verifySignatures           bool
	allowedSigners, gpgKeyring string
	allowNonFastForward        bool
	clouds                     cloudFlags
	// allowLoopbackMetal accepts bare-metal machines at loopback addresses.
	allowLoopbackMetal bool

	// externalURL is where people reach the server; publicURL is its
	// deprecated name (see dashboardURL).
	externalURL string
	publicURL   string

	// notifications is the notifications config file (--notifications).
	notifications string

	// getenv reads the environment: the REZUSCLOUD_* settings and the
	// variables the parts read themselves (credentials, tofu's PATH).
	getenv func(string) string

	talos   talosFlags
	backups backupFlags
	history historyFlags
	oidc    oidcFlags
}

// talosFlags configure the Talos plane and the simulated nodes.
type talosFlags struct {
	installer        string
	timeout          time.Duration
	wait             time.Duration
	probeTTL         time.Duration
	probeConcurrency int
	probeTimeout     time.Duration
	simTimings       string
}

// dashboardURL is the base URL of the dashboard as people reach it:
// --external-url, else the deprecated --public-url, else listen, the
// server's own URL.
func (f *serveFlags) dashboardURL(listen string) string {
	return strings.TrimRight(cmp.Or(f.externalURL, f.publicURL, listen), "/")
}

// newServeCmd builds `serve`; run does the serving once the settings are
// parsed (runServe; tests pass their own).
func newServeCmd(getenv func(string) string, run func(context.Context, *serveFlags, io.Writer) error) *cobra.Command {
	f := serveFlags{getenv: getenv}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the state backend and the API",
		Long: `Serve the Terraform HTTP state backend (/tfstate/{name}), the read-only API
(/api/v1/...), /healthz, /readyz and /version, and, with --repo or --dir,
reconcile the manifests found there: every new commit is validated, rendered
into one OpenTofu workspace per tenant and applied by tofu through this
server's own state backend.

Every setting is a flag, an environment variable (REZUSCLOUD_ and the flag name
in upper case with '_' for '-', as shown below) and a key of the YAML file
given by --config (keys are flag names). A flag beats the environment, which
beats the file, which beats the default.

Clients authenticate with tokens from the tokens file (see
'rezuscloud token create'; a line may end in expires=RFC3339 and owner=NAME,
docs/tokens.md), sent as HTTP basic auth (user = token name, password =
token) or as 'Authorization: Bearer TOKEN'. Without a tokens file
every request is allowed as an admin; the server then listens on loopback
only and refuses any other address.

SIGTERM or SIGINT shuts the server down gracefully, and logs what it waits
for: tenant runs in progress finish (tofu gets --shutdown-grace, then an
interrupt, and saves its state), requests in flight finish, and the store is
closed. The next start on the same data dir goes on where this one stopped.
SIGHUP reloads the tokens file and the users file.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd.Flags(), getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), &f, cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	addServeFlags(fs, &f)
	documentEnv(fs)
	return cmd
}

// addServeFlags defines the settings of serve on fs, with their defaults;
// demo takes its defaults from here too.
func addServeFlags(fs *pflag.FlagSet, f *serveFlags) {
	fs.StringVar(&f.config, configFlag, "", "YAML `FILE` with further settings; keys are flag names")
	fs.StringVar(&f.data, "data", "data", "data `DIR` (mode 0700) that holds tofu's workspaces and, with --store bbolt, the store")
	fs.StringVar(&f.store, "store", engineBolt, "`ENGINE` of the store: bbolt (one server, a file in the data dir) or etcd (one or several servers sharing the store in etcd: --etcd-endpoints)")
	addEtcdFlags(fs, &f.etcd)
	addReplicaFlags(fs, &f.replica)
	fs.StringVar(&f.listen, "listen", backend.DefaultListen, "TCP `ADDR` to serve on")
	fs.StringVar(&f.tokensFile, "tokens-file", "", "tokens `FILE`, one 'NAME ROLE SHA256-HEX' line per token; without it only loopback is served and everyone is admin")
	addUsersFlags(fs, f)
	fs.Int64Var(&f.stateMaxBytes, "state-max-bytes", backend.DefaultMaxStateBytes, "largest TF state a POST may send, in bytes")
	fs.IntVar(&f.stateHistory, "state-history", backend.DefaultStateHistory, "earlier versions kept per TF state; 0 keeps none")
	fs.DurationVar(&f.staleLockAge, "stale-lock-age", backend.DefaultStaleLockAge, "age after which a state lock is reported as stale (never broken); 0 never")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", backend.DefaultShutdownTimeout, "how long a shutdown waits for requests in flight")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", backend.DefaultBodyTimeout, "how long a request body may take to arrive; slower clients get 408 and are disconnected (watches have no body and no limit)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", backend.DefaultIdleTimeout, "how long an idle keep-alive connection stays open")
	fs.Int64Var(&f.bodyMemory, "body-memory", 0, "bytes of request bodies all requests together may hold; a request over it waits, then gets 503 (default: 256 MiB or twice --state-max-bytes, whichever is more)")
	fs.StringVar(&f.repo, "repo", "", "git `URL` of the manifests repository to reconcile (https://, ssh://, git:// or a local path); credentials come from REZUSCLOUD_GIT_* variables")
	fs.StringVar(&f.branch, "branch", "", "`BRANCH` of --repo to follow (default main)")
	fs.StringVar(&f.tag, "tag", "", "`TAG` of --repo to follow instead of a branch")
	fs.StringVar(&f.commit, "commit", "", "pin --repo to this commit `SHA`")
	fs.StringVar(&f.path, "path", "", "`PATH` inside the repository that holds the manifests")
	fs.DurationVar(&f.pollInterval, "poll-interval", sources.DefaultPollInterval, "how often --repo is polled for a new commit")
	fs.StringVar(&f.dir, "dir", "", "local `DIR` of manifests to reconcile instead of --repo, watched for changes")
	fs.StringVar(&f.tofu, "tofu", "", "the tofu `BINARY` (OpenTofu >= 1.10); default: tofu on PATH, else the build `make tools` caches")
	fs.StringVar(&f.providerMirror, "provider-mirror", "", "filesystem mirror `DIR` that holds the simulated provider; default: providers/ beside this binary")
	addCloudFlags(fs, &f.clouds)
	fs.BoolVar(&f.allowLoopbackMetal, "allow-loopback-metal", false, "accept bare-metal machines at loopback addresses (127.0.0.0/8, ::1), where the simulated machines of tests and of 'rezuscloud demo --cloud metal' listen; real machines never need it")
	fs.BoolVar(&f.simCloud, "sim-cloud", false, "host the simulated cloud in this process, for tests and 'rezuscloud demo': the machines of node groups with providerClass sim (and the servers of --sim-openstack) boot as simulated Talos nodes; without it no simulator runs and tenants on providerClass sim stall. Real clouds never need it")
	fs.StringVar(&f.simKubeBin, "sim-kube-bin", "", "`DIR` of the Kubernetes control plane's binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; scripts/kube.sh builds them) that the simulated cloud (--sim-cloud) runs for tenants whose sim node groups set providerConfig.kubernetesAPI; without it those tenants get no Kubernetes API")
	fs.StringVar(&f.simDir, "sim-dir", "", "`DIR` of the simulated cloud (--sim-cloud): its machines, their disks and the state of their simulated Talos nodes; default: DATA-sim beside the data dir")
	fs.IntVar(&f.maxDeletions, "max-deletions", reconciler.DefaultMaxDeletions, "tenants one commit may destroy without a 'Rezuscloud-Allow-Deletions: N' trailer")
	fs.IntVar(&f.workers, "workers", reconciler.DefaultWorkers(), "tenants that run tofu at the same time; default: the number of cores (GOMAXPROCS)")
	fs.DurationVar(&f.debounce, "debounce", 250*time.Millisecond, "how long a tenant stays quiet before its newest revision is applied; bursts of commits coalesce")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", reconciler.DefaultShutdownGrace, "on shutdown, how long running tofu processes may finish before they are interrupted with SIGINT (never SIGKILL)")
	fs.DurationVar(&f.retryBase, "retry-base", reconciler.DefaultRetryBase, "after a tenant's run fails for a passing reason (a held state lock, a cloud API error), how long until it runs again by itself; each further failure in a row waits twice as long, with jitter")
	fs.DurationVar(&f.retryMax, "retry-max", reconciler.DefaultRetryMax, "the longest wait between the retries of a failing tenant")
	fs.StringVar(&f.stateEncryption, "state-encryption", "auto", "state encryption: auto (on when REZUSCLOUD_STATE_PASSPHRASE is set), migrate (also read state written before encryption, and encrypt it), or off")
	addSOPSFlag(fs, f)
	fs.DurationVar(&f.kubeconfigValid, "kubeconfig-validity", reconciler.DefaultKubeconfigValidity, "how long the client certificate of a downloaded kubeconfig is valid")
	fs.StringVar(&f.previewRefs, "preview-refs", "", "`PATTERNS` of refs of --repo to plan (never apply) as previews, comma-separated, e.g. refs/heads/* or refs/pull/*/head; the main ref is always excluded")
	fs.BoolVar(&f.verifySignatures, "verify-signatures", false, "apply only commits of the main ref signed by a trusted key (--allowed-signers, --gpg-keyring); any other commit is refused, and the last good one stays applied; previews still plan and say they are unsigned")
	fs.StringVar(&f.allowedSigners, "allowed-signers", "", "OpenSSH allowed_signers `FILE` of the SSH keys trusted to sign commits (ssh-keygen(1) ALLOWED SIGNERS: PRINCIPALS [namespaces=\"git\"] KEYTYPE KEY)")
	fs.BoolVar(&f.allowNonFastForward, "allow-non-fast-forward", false, "with --verify-signatures, apply a signed commit of the main ref even when it does not descend from the last commit applied (a force push back to an older commit, a history rewrite); without it such a commit is refused until a signed commit on top of it arrives")
	fs.StringVar(&f.gpgKeyring, "gpg-keyring", "", "armored GPG keyring `FILE` of the keys trusted to sign commits (gpg --armor --export)")
	fs.DurationVar(&f.driftInterval, "drift-interval", reconciler.DefaultDriftInterval, "how often each applied tenant gets a drift check (a refresh-only plan), jittered; 0 turns drift checks off")
	fs.StringVar(&f.reports.reporters, "report", "", "where commit statuses go besides the API, comma-separated: github (also Gitea and Forgejo), gitlab, git-notes (refs/notes/rezuscloud pushed to --repo)")
	fs.StringVar(&f.reports.instance, "instance", "", "this server's name in commit status contexts (rezuscloud/INSTANCE/TENANT), so that two servers on one repository do not overwrite each other; default: the host name")
	fs.StringVar(&f.externalURL, "external-url", "", "base `URL` under which people reach this server (e.g. https://rezuscloud.example.com behind a TLS proxy), for the dashboard's links in commit statuses and its Secure cookies; default: the listen address")
	fs.StringVar(&f.publicURL, "public-url", "", "deprecated name of --external-url")
	fs.MarkDeprecated("public-url", "use --external-url")
	fs.StringVar(&f.reports.githubAPI, "github-api-url", "", "GitHub API base `URL`; https://HOST/api/v3 for GitHub Enterprise; Gitea and Forgejo are found from --repo")
	fs.StringVar(&f.reports.githubTokenFile, "github-token-file", "", "`FILE` holding the token for GitHub, Gitea or Forgejo commit statuses; or set REZUSCLOUD_GITHUB_TOKEN")
	fs.StringVar(&f.reports.gitlabAPI, "gitlab-api-url", "", "GitLab API base `URL`, https://HOST/api/v4; default gitlab.com")
	fs.StringVar(&f.reports.gitlabTokenFile, "gitlab-token-file", "", "`FILE` holding the token for GitLab commit statuses; or set REZUSCLOUD_GITLAB_TOKEN")
	fs.StringVar(&f.webhookSecretFile, "webhook-secret-file", "", "`FILE` holding the secret that push webhooks (/hooks/github, /hooks/gitlab, /hooks/generic) are signed with; or set REZUSCLOUD_WEBHOOK_SECRET")
	fs.StringVar(&f.notifications, "notifications", "", "YAML `FILE` of the notifications: the providers (Slack, Microsoft Teams, Discord, Google Chat, Matrix, PagerDuty, Opsgenie, Alertmanager, webhooks) that events such as a failed apply, drift or a refused commit go to, and the alerts that select them; their secrets are in files it names (see docs/notifications.md). Default: none")
	addBackupFlags(fs, &f.backups)
	fs.StringVar(&f.talos.installer, "talos-installer", "ghcr.io/siderolabs/installer", "installer `IMAGE` (registry and repository, no tag) whose tag vX.Y.Z a Talos upgrade installs")
	fs.DurationVar(&f.talos.timeout, "talos-timeout", 10*time.Minute, "how long a machine may take to be back and ready after a config apply, upgrade or reboot; an upgraded machine that is not is rolled back and the rollout stops")
	fs.DurationVar(&f.talos.wait, "talos-wait", 5*time.Minute, "how long a tenant's run waits for a machine or etcd to be ready (bootstrap, rollout gates) before it retries later")
	fs.DurationVar(&f.talos.probeTTL, "probe-ttl", 15*time.Second, "how often each machine is asked for its status over the Talos API, at most")
	fs.IntVar(&f.talos.probeConcurrency, "probe-concurrency", 32, "machines probed at the same time, at most: a machine that answers in time only when asked again halves them, down to 4, and each run of as many probes in time adds one back")
	fs.DurationVar(&f.talos.probeTimeout, "probe-timeout", 3*time.Second, "how long a probe waits for a machine; one that does not answer within it is asked once more, and shown as not connected when it does not answer then either")
	addHistoryFlags(fs, &f.history)
	addOIDCFlags(fs, &f.oidc)
	fs.StringVar(&f.talos.simTimings, "sim-timings", "", "stage durations of the simulated nodes (--sim-cloud), e.g. boot=200ms,reboot=400ms,upgrade=300ms,fallback=2s (also install, reset, log); default: the nodes' own")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	addMemoryLimitFlag(fs, f)
	fs.StringVar(&f.pprofListen, "pprof-listen", "", "loopback `ADDR` (e.g. 127.0.0.1:6060) to serve Go's runtime profiles on, at /debug/pprof/, apart from the API; no authentication, so other addresses are refused; default: off")
}

// serverConfig turns the settings into a backend.Config.
func serverConfig(f *serveFlags, log *slog.Logger) (backend.Config, error) {
	if f.data == "" {
		return backend.Config{}, fmt.Errorf("no data directory: give --data or %s", envName("data"))
	}
	history := f.stateHistory
	switch {
	case history < 0:
		return backend.Config{}, fmt.Errorf("--state-history %d: want 0 or more", history)
	case history == 0:
		history = -1
	}
	if f.stateMaxBytes <= 0 {
		return backend.Config{}, fmt.Errorf("--state-max-bytes %d: want a positive size", f.stateMaxBytes)
	}
	stale := f.staleLockAge
	switch {
	case stale < 0:
		return backend.Config{}, fmt.Errorf("--stale-lock-age %v: want 0 or more", stale)
	case stale == 0:
		stale = -1
	}
	if f.bodyTimeout <= 0 || f.idleTimeout <= 0 {
		return backend.Config{}, fmt.Errorf("--body-timeout %v and --idle-timeout %v: want positive durations", f.bodyTimeout, f.idleTimeout)
	}
	if f.bodyMemory < 0 {
		return backend.Config{}, fmt.Errorf("--body-memory %d: want a positive size, or 0 for the default", f.bodyMemory)
	}
	if _, err := f.history.options(); err != nil {
		return backend.Config{}, err
	}
	if _, _, err := sopsKeys(f.sopsAgeKeyFile); err != nil {
		return backend.Config{}, err
	}
	return backend.Config{
		DataDir:         f.data,
		Listen:          f.listen,
		TokensFile:      f.tokensFile,
		MaxStateBytes:   f.stateMaxBytes,
		StateHistory:    history,
		StaleLockAge:    stale,
		ShutdownTimeout: f.shutdownTimeout,
		BodyTimeout:     f.bodyTimeout,
		IdleTimeout:     f.idleTimeout,
		BodyMemory:      f.bodyMemory,
		Version:         version.Version,
		Logger:          log,
	}, nil
}

func newLogger(f *serveFlags, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

// runServe serves until a signal says to stop: SIGTERM or SIGINT shut down
// gracefully, SIGHUP reloads the tokens file.
func runServe(ctx context.Context, f *serveFlags, stderr io.Writer) error {
	log, err := newLogger(f, stderr)
	if err != nil {
		return err
	}
	if err := setMemoryLimit(f.memoryLimit, f.workers, log); err != nil {
		return err
	}
	m := NewMain(f, log)
	if err := m.Open(); err != nil {
		return err
	}
	defer m.Close()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := m.Server.Tokens().Reload(); err != nil {
					log.Error("reload tokens file; keeping the tokens in use", "err", err)
				} else {
					log.Info("tokens file reloaded", "tokens", m.Server.Tokens().Len())
				}
				m.reloadUsers()
			}
		}
	}()
	return m.Run(ctx)
}
