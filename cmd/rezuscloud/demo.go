package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/render/provider/openstack"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// demoFlags are the settings of `rezuscloud demo`.
type demoFlags struct {
	data           string
	listen         string
	tofu           string
	providerMirror string
	exitAfterApply bool
	cloud          string
	// simKubeBin, when set, gives the sim demo's tenants a real
	// Kubernetes API at loopback endpoints of kubeNet (demoKube).
	simKubeBin string
	kubeNet    string
}

// demoCloud is what differs between the demo on the simulated cloud and on
// the simulated OpenStack.
type demoCloud struct {
	manifests fs.FS  // laid out under examples/
	dir       string // the directory of manifests to take ("." for all)
	tenant    string // the tenant the hints name
	scale     string // the file of the hints' scale-up, under examples/
	message   string // the first commit's message
}

func demoClouds() map[string]demoCloud {
	return map[string]demoCloud{
		"sim": {manifests: examples.FS, dir: ".", tenant: "production", scale: "production/nodegroups.yaml",
			message: "Example tenants production and staging on the simulated cloud\n"},
		"openstack": {manifests: examples.CloudFS, dir: "openstack", tenant: "openstack-prod", scale: "openstack/nodegroups.yaml",
			message: "Example tenant openstack-prod on the simulated OpenStack\n"},
		"metal": {manifests: examples.CloudFS, dir: "metal", tenant: "metal-lab", scale: "metal/nodegroups.yaml",
			message: "Example tenant metal-lab on simulated bare metal\n"},
	}
}

func newDemoCmd(getenv func(string) string) *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run RezusCloud on the example manifests and the simulated cloud",
		Long: `Demo lays out the example manifests as a local git repository, starts the
server on localhost with the simulated cloud provider, reconciles the first
commit and prints what to try next. Commit a change in the printed repository
and the server applies it within seconds.

Ctrl-C stops it, saying what the stop waits for. Running it again reuses the
data dir: it goes on where the last run stopped, or says that the commit is
already applied and runs nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), &f, getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.data, "data", filepath.Join(".data", "demo"), "data `DIR` of the demo; the repository goes into DIR/repo")
	fs.StringVar(&f.listen, "listen", backend.DefaultListen, "loopback `ADDR` to serve on")
	fs.StringVar(&f.tofu, "tofu", getenv("TOFU"), "the tofu `BINARY`; default: $TOFU, tofu on PATH, else the build `make tools` caches")
	fs.StringVar(&f.providerMirror, "provider-mirror", "", "filesystem mirror `DIR` holding the simulated provider; default: providers/ beside this binary")
	fs.BoolVar(&f.exitAfterApply, "exit-after-apply", false, "stop once the first commit is reconciled, instead of serving until interrupted")
	fs.StringVar(&f.simKubeBin, "sim-kube-bin", "", "`DIR` of the Kubernetes control plane's binaries (scripts/kube.sh builds them; make demo passes them): with it, the sim demo's tenants get a real Kubernetes API at loopback endpoints, for kubectl")
	fs.StringVar(&f.kubeNet, "sim-kube-net", exampleKubeNet, "the first three parts of the loopback addresses of the demo tenants' Kubernetes endpoints (with --sim-kube-bin)")
	_ = fs.MarkHidden("sim-kube-net")
	fs.StringVar(&f.cloud, "cloud", "sim", "where the demo's machines run: sim (the simulated cloud), openstack (examples/openstack on a simulated OpenStack API, driven by the real OpenStack provider; its default data dir is .data/demo-openstack) or metal (examples/metal on simulated bare-metal machines waiting in maintenance mode; .data/demo-metal)")
	return cmd
}

// openStackProvider is the address of the OpenStack provider in a
// filesystem mirror, where `make openstack-provider` installs it.
const openStackProvider = "registry.opentofu.org/" + openstack.Source

// demoStep prints the demo's progress: step n of 5.
type demoStep struct{ w io.Writer }

func (s demoStep) printf(n int, format string, args ...any) {
	fmt.Fprintf(s.w, "[%d/5] %s\n", n, fmt.Sprintf(format, args...))
}

func runDemo(ctx context.Context, f *demoFlags, getenv func(string) string, stdout, stderr io.Writer) error {
	step := demoStep{stdout}
	cloud, ok := demoClouds()[f.cloud]
	if !ok {
		return fmt.Errorf("--cloud %q: want sim, openstack or metal", f.cloud)
	}
	if f.cloud != "sim" && f.data == filepath.Join(".data", "demo") {
		f.data = filepath.Join(".data", "demo-"+f.cloud)
	}
	data, repo, sha, err := prepareDemo(f, cloud, step)
	if err != nil {
		return err
	}
	log, err := newLogger(&serveFlags{logLevel: "warn", logFormat: "text"}, stderr)
	if err != nil {
		return err
	}
	sf := demoServeFlags(f, data, repo, getenv)
	where := "sim machines in " + defaultSimDir(sf.data)
	if f.cloud == "openstack" {
		sf.clouds.simOpenStack = filepath.Join(data, "openstack")
		sf.clouds.simAddresses = "127.2.0.0/16"
		where = "simulated OpenStack in " + sf.clouds.simOpenStack
		if mirror, err := findMirror(f.providerMirror); err == nil && !slices.Contains(tfcli.Mirrored(mirror), openStackProvider) {
			fmt.Fprintf(stdout, "      the OpenStack provider is not in the mirror %s: tofu asks the registry for it (offline, `make demo CLOUD=openstack` builds it into the mirror)\n", mirror)
		}
	}
	m := NewMain(sf, log)
	m.say = func(msg string) { fmt.Fprintln(stdout, msg) }
	m.resume = "`make demo` (or this command again) resumes where it left off"
	if err := m.Open(); err != nil {
		return err
	}
	defer m.Close()
	if f.cloud == "metal" {
		addrs, err := startDemoMetal(m.rec.nodes, cloud)
		if err != nil {
			return err
		}
		where = "bare-metal machines in maintenance mode at " + strings.Join(addrs, ", ")
	}
	step.printf(3, "dashboard %s/ (open it to watch the first apply; %s)", m.Server.URL(), where)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var runErr error
	stopped := make(chan struct{})
	go func() { runErr = m.Run(runCtx); close(stopped) }()
	shutdown := func() error { stopRun(); <-stopped; return runErr }

	c, err := demoCommit(ctx, m.Server.Store(), sha, stopped, step)
	if err != nil {
		if ctx.Err() != nil { // interrupted: the stop says so
			return shutdown()
		}
		shutdown()
		return err
	}
	printDemoResult(stdout, step, c, m.Server.URL(), repo, sha, f.cloud, cloud, demoKubectl(f, repo))
	if f.exitAfterApply {
		if err := shutdown(); err != nil {
			return err
		}
		if c.Status.Phase != schema.CommitSucceeded {
			return fmt.Errorf("commit %.12s: %s", sha, c.Status.Phase)
		}
		return nil
	}
	select {
	case <-ctx.Done():
	case <-stopped:
	}
	return shutdown()
}

// prepareDemo makes the demo's data dir and its repository of the example
// manifests (steps 1 and 2).
func prepareDemo(f *demoFlags, cloud demoCloud, step demoStep) (data, repo, sha string, err error) {
	if data, err = filepath.Abs(f.data); err != nil {
		return "", "", "", err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", "", "", fmt.Errorf("demo data dir: %w", err)
	}
	step.printf(1, "data dir %s", data)
	repo = filepath.Join(data, "repo")
	sha, created, err := demoRepository(repo, cloud, demoKube(f))
	if err != nil {
		return "", "", "", err
	}
	if created {
		step.printf(2, "created git repository %s with the example manifests (commit %.12s)", repo, sha)
	} else {
		step.printf(2, "using git repository %s (HEAD %.12s)", repo, sha)
	}
	return data, repo, sha, nil
}

// demoServeFlags are serve's settings for the demo: serve's defaults, the
// demo's repository polled every 2 s, and the demo's own flags.
func demoServeFlags(f *demoFlags, data, repo string, getenv func(string) string) *serveFlags {
	sf := &serveFlags{getenv: getenv}
	addServeFlags(pflag.NewFlagSet("demo", pflag.ContinueOnError), sf)
	sf.data, sf.listen, sf.repo, sf.path = filepath.Join(data, "server"), f.listen, repo, "examples"
	sf.pollInterval, sf.tofu, sf.providerMirror = 2*time.Second, f.tofu, f.providerMirror
	sf.logLevel, sf.logFormat = "warn", "text"
	// Machine status follows the machines closely, to be watched.
	sf.talos.probeTTL = 2 * time.Second
	// The demo's machines are simulated, in this process.
	sf.simCloud = true
	// The metal demo's simulated machines listen on loopback addresses.
	sf.allowLoopbackMetal = f.cloud == "metal"
	if f.cloud == "sim" {
		sf.simKubeBin = f.simKubeBin
	}
	return sf
}

// demoKubectl is the kubectl to name in the hints: the one beside the
// control plane's binaries, when the demo's repository asks for a
// Kubernetes API (it was made with --sim-kube-bin); "" otherwise.
func demoKubectl(f *demoFlags, repo string) string {
	if demoKube(f) == nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(repo, "examples", "production", "nodegroups.yaml"))
	if err != nil || !strings.Contains(string(b), "kubernetesAPI: true") {
		return ""
	}
	return filepath.Join(f.simKubeBin, "kubectl")
}

// exampleKubeNet is the network of the examples' loopback endpoints
// (production .1, staging .2).
const exampleKubeNet = "127.250.0"

// demoKube returns, for the sim demo with --sim-kube-bin, the edit that
// gives its tenants a Kubernetes API: each sim node group sets
// providerConfig.kubernetesAPI, and each tenant's controlPlaneEndpoint
// moves to --sim-kube-net when that is not the examples' own network. nil
// otherwise: the example manifests as they are.
func demoKube(f *demoFlags) func(name string, b []byte) []byte {
	if f.cloud != "sim" || f.simKubeBin == "" {
		return nil
	}
	return func(name string, b []byte) []byte {
		s := string(b)
		if path.Base(name) == "tenant.yaml" && f.kubeNet != exampleKubeNet {
			s = strings.Replace(s, "https://"+exampleKubeNet+".", "https://"+f.kubeNet+".", 1)
		}
		if path.Base(name) == "nodegroups.yaml" {
			s = strings.ReplaceAll(s, "  providerConfig:\n", "  providerConfig:\n    kubernetesAPI: true\n")
		}
		return []byte(s)
	}
}

// printDemoResult prints the first commit's outcome (step 5) and what to
// try next.
func printDemoResult(stdout io.Writer, step demoStep, c *schema.Commit, u, repo, sha, cloudName string, cloud demoCloud, kubectl string) {
	var parts []string
	for _, tr := range c.Status.Tenants {
		s := fmt.Sprintf("%s %s", tr.Tenant, tr.Plan.Text())
		if tr.Error != "" {
			s += " (" + tr.Error + ")"
		}
		parts = append(parts, s)
	}
	step.printf(5, "commit %.12s %s: %s", sha, c.Status.Phase, strings.Join(parts, "; "))
	for _, p := range c.Status.Problems {
		fmt.Fprintln(stdout, "      "+p.String())
	}
	fmt.Fprintf(stdout, `
RezusCloud is running the example manifests on the %[5]s.

  Dashboard  %[1]s/
  API        %[1]s/api/v1/status
  tenants    curl -s %[1]s/api/v1/tenants
  machines   curl -s %[1]s/api/v1/machines
             curl -s '%[1]s/api/v1/machines?labelSelector=rezuscloud.io/role=worker'
  commits    curl -s %[1]s/api/v1/commits
  one tenant curl -s %[1]s/api/v1/tenants/%[4]s/node-groups
  CLI        %[3]s get machines -s %[1]s
             %[3]s describe tenant %[4]s -s %[1]s

Change something and watch it apply:

  cd %[2]s
  sed -i 's/count: 2/count: 3/' examples/%[6]s
  %[3]s diff%[7]s -s %[1]s examples
  git commit -am 'Scale %[4]s workers to 3'
  %[3]s get machines -t %[4]s -s %[1]s

Stop with Ctrl-C; run it again to go on where it stopped.
`, u, repo, rezusctlPath(), cloud.tenant, map[string]string{"sim": "simulated cloud", "openstack": "simulated OpenStack", "metal": "simulated bare metal"}[cloudName], cloud.scale,
		map[string]string{"metal": " --allow-loopback-metal"}[cloudName])
	if cloudName == "sim" {
		// The simulated cloud's machines are simulated Talos nodes: the
		// Talos plane bootstrapped them and rolls changes through them.
		fmt.Fprintf(stdout, `
Each machine answers the Talos API; its status (stage, Talos version,
config up to date) comes from there. Upgrade Talos by commit and watch the
machines roll, control planes first, one at a time:

  %[3]s get machines -t %[4]s -w -o wide -s %[1]s &
  sed -i 's/talosVersion: "1.12.6"/talosVersion: "1.12.7"/' examples/%[4]s/tenant.yaml
  git commit -am 'Upgrade %[4]s to Talos 1.12.7'
  %[3]s describe tenant %[4]s -s %[1]s    # the Upgrading condition: machine n of N
`, u, repo, rezusctlPath(), cloud.tenant)
	}
	if kubectl != "" {
		fmt.Fprintf(stdout, `
Each tenant has a real Kubernetes API, and each machine is its Node's
kubelet. Use it with kubectl, and watch a node go to SchedulingDisabled and
back while a Talos upgrade by commit drains it:

  %[3]s kubeconfig %[4]s -f %[4]s.kubeconfig -s %[1]s
  %[5]s --kubeconfig %[4]s.kubeconfig get nodes -w &
  sed -i 's/talosVersion: "1.12.6"/talosVersion: "1.12.7"/' examples/%[4]s/tenant.yaml
  git commit -am 'Upgrade %[4]s to Talos 1.12.7'
`, u, repo, rezusctlPath(), cloud.tenant, kubectl)
	}
	if c.Status.Phase != schema.CommitSucceeded {
		fmt.Fprintf(stdout, "\nThe first commit did not succeed (%s): see the commit's page at %s\n", c.Status.Phase, commitPage(u, schema.CommitName(sha)))
	}
}

// rezusctlPath is where the CLI that was built beside this binary is.
func rezusctlPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "rezusctl"
	}
	p := filepath.Join(filepath.Dir(exe), "rezusctl")
	if _, err := os.Stat(p); err != nil {
		return "rezusctl"
	}
	return p
}

// demoRepository makes sure dir holds a git repository with the example
// manifests and the JSON Schemas they point at, committed on main. It
// returns the HEAD commit and whether it created the repository.
func demoRepository(dir string, cloud demoCloud, edit func(name string, b []byte) []byte) (string, bool, error) {
	if r, err := git.PlainOpen(dir); err == nil {
		head, err := r.Head()
		if err != nil {
			return "", false, fmt.Errorf("demo repository %s: %w", dir, err)
		}
		if err := setDemoIdentity(r); err != nil {
			return "", false, fmt.Errorf("demo repository %s: %w", dir, err)
		}
		return head.Hash().String(), false, nil
	} else if !errors.Is(err, git.ErrRepositoryNotExists) {
		return "", false, fmt.Errorf("demo repository %s: %w", dir, err)
	}
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")},
	})
	if err != nil {
		return "", false, fmt.Errorf("create demo repository: %w", err)
	}
	if err := setDemoIdentity(r); err != nil {
		return "", false, fmt.Errorf("create demo repository: %w", err)
	}
	write := func(fsys fs.FS, root, prefix string) error {
		return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			if edit != nil && prefix == "examples" {
				b = edit(p, b)
			}
			dst := filepath.Join(dir, filepath.FromSlash(path.Join(prefix, p)))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		})
	}
	if err := write(cloud.manifests, cloud.dir, "examples"); err != nil {
		return "", false, err
	}
	if err := write(schema.Files(), ".", "schema"); err != nil {
		return "", false, err
	}
	wt, err := r.Worktree()
	if err != nil {
		return "", false, err
	}
	if err := wt.AddGlob("."); err != nil {
		return "", false, err
	}
	sig := &object.Signature{Name: demoUserName, Email: demoUserEmail, When: time.Now()}
	h, err := wt.Commit(cloud.message, &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		return "", false, fmt.Errorf("commit demo repository: %w", err)
	}
	return h.String(), true, nil
}

// The identity of the demo repository's commits: its first, and those
// that the printed hints make.
const (
	demoUserName  = "RezusCloud demo"
	demoUserEmail = "demo@rezuscloud.invalid"
)

// setDemoIdentity sets user.name and user.email in the repository's own
// config (.git/config), unless it has them, so that the `git commit` the
// hints print works where git knows no identity (an empty HOME, a host
// without a domain).
func setDemoIdentity(r *git.Repository) error {
	cfg, err := r.Config()
	if err != nil {
		return err
	}
	if cfg.User.Name != "" && cfg.User.Email != "" {
		return nil
	}
	cfg.User.Name = cmp.Or(cfg.User.Name, demoUserName)
	cfg.User.Email = cmp.Or(cfg.User.Email, demoUserEmail)
	if err := r.SetConfig(cfg); err != nil {
		return fmt.Errorf("set the git identity: %w", err)
	}
	return nil
}

// demoCommit says what becomes of the demo's commit (step 4) and returns
// its record once it has finished: the record of a run of the demo before
// this one, when that run applied it, since nothing runs then.
func demoCommit(ctx context.Context, st store.Store, sha string, stopped <-chan struct{}, step demoStep) (*schema.Commit, error) {
	prev, err := storedCommit(st, sha)
	if err != nil {
		return nil, err
	}
	if prev != nil && prev.Status.Phase == schema.CommitSucceeded {
		step.printf(4, "commit %.12s is already applied (an earlier run of the demo applied it): nothing to run", sha)
		return prev, nil
	}
	step.printf(4, "reconciling commit %.12s with tofu (a first apply takes a few seconds)", sha)
	return waitForCommit(ctx, st, sha, stopped)
}

// storedCommit returns the stored Commit of revision sha, or nil.
func storedCommit(st store.Store, sha string) (*schema.Commit, error) {
	var c *schema.Commit
	err := st.View(func(tx store.Tx) error {
		var v schema.Commit
		err := tx.GetObject(schema.KindCommit, schema.CommitName(sha), &v)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		c = &v
		return nil
	})
	return c, err
}

// waitForCommit waits until the Commit of revision sha has finished, or
// the server has stopped.
func waitForCommit(ctx context.Context, st store.Store, sha string, stopped <-chan struct{}) (*schema.Commit, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		c, err := storedCommit(st, sha)
		if err != nil {
			return nil, err
		}
		if c != nil && c.Status.Phase.Done() {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stopped:
			return nil, fmt.Errorf("the server stopped before commit %.12s finished", sha)
		case <-t.C:
		}
	}
}
