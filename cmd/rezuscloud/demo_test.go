package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// gitWithoutIdentity runs git in dir where git knows no identity of its
// own: an empty HOME, no system config, and user.useConfigOnly, so that it
// cannot guess one from the host's name either.
func gitWithoutIdentity(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GIT_") || k == "HOME" || k == "XDG_CONFIG_HOME" || k == "EMAIL" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=user.useConfigOnly", "GIT_CONFIG_VALUE_0=true")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDemoRepositoryHasIdentity: the `git commit -am` that the demo's
// hints print works where git knows no identity, because the demo
// repository's own config has one; and a repository that an earlier demo
// made without one gets it when the demo runs again.
func TestDemoRepositoryHasIdentity(t *testing.T) {
	cloud := demoClouds()["sim"]
	repo := filepath.Join(t.TempDir(), "repo")
	if _, created, err := demoRepository(repo, cloud, nil); err != nil || !created {
		t.Fatalf("demoRepository: created %v, %v", created, err)
	}
	commitChange := func(change string) {
		t.Helper()
		f := filepath.Join(repo, "examples", filepath.FromSlash(cloud.scale))
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, "# "+change+"\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := gitWithoutIdentity(t, repo, "commit", "-am", change); err != nil {
			t.Fatalf("git commit -am in the demo repository: %v\n%s", err, out)
		}
		out, err := gitWithoutIdentity(t, repo, "log", "-1", "--format=%an <%ae>")
		if err != nil || strings.TrimSpace(out) != demoUserName+" <"+demoUserEmail+">" {
			t.Fatalf("the commit's author: %q, %v", out, err)
		}
	}
	commitChange("A first change")

	// A repository without an identity, as earlier demos made them.
	for _, key := range []string{"user.name", "user.email"} {
		if out, err := gitWithoutIdentity(t, repo, "config", "--local", "--unset", key); err != nil {
			t.Fatalf("unset %s: %v\n%s", key, err, out)
		}
	}
	if _, created, err := demoRepository(repo, cloud, nil); err != nil || created {
		t.Fatalf("demoRepository again: created %v, %v", created, err)
	}
	commitChange("A second change")
}

// demoOutput is what a demo prints, as it prints it, from any goroutine.
type demoOutput struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{} // closed and replaced at every write
}

func newDemoOutput() *demoOutput { return &demoOutput{written: make(chan struct{})} }

func (o *demoOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(p)
	close(o.written)
	o.written = make(chan struct{})
	return len(p), nil
}

func (o *demoOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// demoRun is one run of the demo on the test's data dir.
type demoRun struct {
	out     *demoOutput
	cancel  context.CancelFunc // Ctrl-C
	done    chan error
	stopped chan struct{} // closed when the demo has returned
}

// waitFor waits until the demo's output matches re, and returns the
// match; it fails the test when the demo returns without printing it.
func (r *demoRun) waitFor(t *testing.T, ctx context.Context, re *regexp.Regexp) []string {
	t.Helper()
	o := r.out
	for {
		o.mu.Lock()
		m, wait := re.FindStringSubmatch(o.b.String()), o.written
		o.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-wait:
		case <-r.stopped:
			if m := re.FindStringSubmatch(o.String()); m != nil {
				return m
			}
			t.Fatalf("the demo returned without printing %q; it printed:\n%s", re, o)
		case <-ctx.Done():
			t.Fatalf("the demo did not print %q; it printed:\n%s", re, o)
		}
	}
}

// startDemo runs the demo on the simulated cloud with the real tofu and
// simulated provider, on 127.0.0.1:0, until it stops by itself
// (exitAfterApply) or is cancelled as Ctrl-C cancels it.
func startDemo(t *testing.T, data string, exitAfterApply bool, env map[string]string) *demoRun {
	t.Helper()
	return startDemoWith(t, &demoFlags{data: data, listen: "127.0.0.1:0", tofu: testenv.Tofu(t), providerMirror: testenv.ProviderMirror(t),
		exitAfterApply: exitAfterApply, cloud: "sim"}, env)
}

// startDemoWith runs the demo with f and the environment env, as
// startDemo does.
func startDemoWith(t *testing.T, f *demoFlags, env map[string]string) *demoRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &demoRun{out: newDemoOutput(), cancel: cancel, done: make(chan error, 1), stopped: make(chan struct{})}
	go func() {
		r.done <- runDemo(ctx, f, func(k string) string { return env[k] }, r.out, io.Discard)
		close(r.stopped)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// wait waits until the demo has returned, and returns its error.
func (r *demoRun) wait(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-ctx.Done():
		t.Fatalf("the demo did not stop; it printed:\n%s", r.out)
		return nil
	}
}

// TestDemoStopAndRestart: Ctrl-C during the first apply says what the
// stop waits for (the tenant runs in progress) and how to go on; a demo
// started again finishes the commit, and once the commit is applied, a
// demo started again says so and runs nothing, instead of claiming to
// reconcile it.
func TestDemoStopAndRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data := filepath.Join(t.TempDir(), "demo")
	// Machines take a while to create, so that Ctrl-C comes while tofu
	// applies.
	slow := map[string]string{simCreateDelay: "2s"}

	first := startDemo(t, data, false, slow)
	first.waitFor(t, ctx, regexp.MustCompile(`\[4/5\] reconciling commit`))
	machines, err := sim.Open(defaultSimDir(filepath.Join(data, "server")))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if list, err := machines.List(); err == nil && len(list) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no machine was created; the demo printed:\n%s", first.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	first.cancel()
	m := first.waitFor(t, ctx, regexp.MustCompile(`(?m)^stopping: waiting for (\d+) tenant runs? to finish \(up to 5m0s, then tofu is interrupted and saves its state\)`))
	if m[1] == "0" {
		t.Fatalf("stopping while tofu applies waits for %s tenant runs", m[1])
	}
	if err := first.wait(t, ctx); err != nil {
		t.Fatalf("the demo stopped with %v; it printed:\n%s", err, first.out)
	}
	if !regexp.MustCompile("(?m)^stopped; `make demo` \\(or this command again\\) resumes where it left off$").MatchString(first.out.String()) {
		t.Fatalf("the stop did not end saying how to go on; the demo printed:\n%s", first.out)
	}

	t.Logf("the first start printed:\n%s", first.out)

	// Started again until the commit is applied: the stop above let the
	// runs in progress finish, so the second start may already find it
	// applied.
	applied := regexp.MustCompile(`\[4/5\] commit ([0-9a-f]{12}) is already applied \(an earlier run of the demo applied it\): nothing to run`)
	var again *demoRun
	for i := 0; ; i++ {
		again = startDemo(t, data, true, nil)
		if err := again.wait(t, ctx); err != nil {
			t.Fatalf("start %d: %v; the demo printed:\n%s", i+2, err, again.out)
		}
		t.Logf("start %d printed:\n%s", i+2, again.out)
		if applied.MatchString(again.out.String()) {
			break
		}
		if i > 0 || !strings.Contains(again.out.String(), "[5/5] commit") {
			t.Fatalf("start %d, after a start that applied the commit, did not say it is applied; the demo printed:\n%s", i+2, again.out)
		}
	}
	out := again.out.String()
	if strings.Contains(out, "reconciling commit") || !strings.Contains(out, "Succeeded") {
		t.Fatalf("a start with the commit applied:\n%s", out)
	}
}

// TestDemoKubernetes: with --sim-kube-bin, the sim demo's tenants get a
// real Kubernetes API at loopback endpoints, and the hints' kubectl, with
// the kubeconfig that `rezusctl kubeconfig` downloads, lists a Ready Node
// for each machine of the tenant.
func TestDemoKubernetes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubeBin := testenv.KubeBin(t)
	var r [1]byte
	_, _ = rand.Read(r[:])
	f := &demoFlags{data: filepath.Join(t.TempDir(), "demo"), listen: "127.0.0.1:0", tofu: testenv.Tofu(t), providerMirror: testenv.ProviderMirror(t),
		cloud: "sim", simKubeBin: kubeBin, kubeNet: fmt.Sprintf("127.248.%d", r[0])}
	run := startDemoWith(t, f, nil)
	m := run.waitFor(t, ctx, regexp.MustCompile(`(?m)^  Dashboard  (http://\S+)/$`))
	url := m[1]
	hint := run.waitFor(t, ctx, regexp.MustCompile(`(?m)^  (\S+) --kubeconfig production.kubeconfig get nodes -w &$`))
	if hint[1] != filepath.Join(kubeBin, "kubectl") {
		t.Errorf("the hints' kubectl is %s, want %s", hint[1], filepath.Join(kubeBin, "kubectl"))
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if out, err := exec.Command(servertest.CLI(t), "kubeconfig", "production", "-f", kc, "-s", url).CombinedOutput(); err != nil {
		t.Fatalf("rezusctl kubeconfig production: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(kc); err != nil || !strings.Contains(string(b), "server: https://"+f.kubeNet+".1:6443") {
		t.Errorf("the kubeconfig does not point at %s.1:6443: %v\n%s", f.kubeNet, err, b)
	}
	machines, err := sim.Open(defaultSimDir(filepath.Join(f.data, "server")))
	if err != nil {
		t.Fatal(err)
	}
	var nodes string
	for {
		out, err := exec.Command(filepath.Join(kubeBin, "kubectl"), "--kubeconfig", kc, "--request-timeout", "5s", "get", "nodes",
			"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`).CombinedOutput()
		nodes = string(out)
		list, lerr := machines.List()
		production := 0
		for _, rec := range list {
			if rec.Tenant == "production" {
				production++
			}
		}
		if err == nil && lerr == nil && production > 0 && strings.Count(nodes, " True\n") == production {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kubectl get nodes of production: %v\n%s", err, nodes)
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Logf("production's Nodes:\n%s", nodes)
}
