package test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestSimWorldProcessSharedByServers runs the simulated world as a
// process of its own (`rezuscloud sim serve`) and two servers on it
// (`serve --sim-world`), as replicas share one cloud. Server A applies
// tenant staging: its machines are the world's records and answer from
// the world's process. Server B, on a copy of A's store in its own data
// dir, sees the same machines ready while A runs, without a tofu run and
// without a write call to a machine. When A stops, the machines go on
// answering; when the world stops, B sees them disconnected, and when the
// world starts again on its dir, connected again.
func TestSimWorldProcessSharedByServers(t *testing.T) {
	world := filepath.Join(t.TempDir(), "world")
	w := startSimWorld(t, world, "--sim-timings", planeTimings)

	e := &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(t.TempDir(), "a")}
	e.daemon.CreateBare("repo.git")
	e.repo = e.daemon.URL("repo.git")
	e.work = gittest.NewWorkdir(t, e.repo)
	e.copyExamples()
	if err := os.RemoveAll(filepath.Join(e.work.Dir(), e2eManifests, "production")); err != nil { // one tenant: the quicker
		t.Fatal(err)
	}
	e.first = e.push("Tenant staging")
	opts := servertest.Options{Data: e.data, Repo: e.repo, Path: e2eManifests, Args: []string{
		"--sim-world", world, "--poll-interval", "300ms", "--debounce", "0s",
		"--probe-ttl", "300ms", "--talos-timeout", "5s", "--talos-wait", "30s", "--drift-interval", "0"}}
	a := newE2EServer(t, opts)
	a.Start()
	e.srv = a
	if c := a.waitApplied(e.first); c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("server A, first commit: %s", e2eBrief(c.Status))
	}
	planeWaitReady(t, e, "staging")
	machines := e2eMachineIDs(a.tenantMachines("staging"))
	if diff := cmp.Diff(e2eKeys(machines), worldMachines(t, world)); diff != "" {
		t.Fatalf("server A's machines against the world's records (-A +world):\n%s", diff)
	}
	calls := storeJournal(t, world, machines)

	file := filepath.Join(t.TempDir(), "a.db")
	storeCmd(t, nil, "store", "backup", file, "--server", a.URL())
	opts.Data = filepath.Join(t.TempDir(), "b")
	storeCmd(t, nil, "store", "restore", file, "--data", opts.Data)
	b := newE2EServer(t, opts)
	b.Start()
	e.srv = b
	if c := b.waitApplied(e.first); c.Status.Phase != schema.CommitSucceeded {
		t.Errorf("server B, the commit A applied: %s", e2eBrief(c.Status))
	}
	planeWaitReady(t, e, "staging")
	if got := b.tofuRuns(); got != 0 {
		t.Errorf("server B ran tofu %d times for the commit A applied, want 0", got)
	}
	if diff := cmp.Diff(machines, e2eMachineIDs(b.tenantMachines("staging"))); diff != "" {
		t.Errorf("server B's machines (-A +B):\n%s", diff)
	}
	if diff := cmp.Diff(calls, storeJournal(t, world, machines)); diff != "" {
		t.Errorf("server B called the machines (-before +after):\n%s", diff)
	}

	a.Stop()
	for _, m := range b.tenantMachines("staging") {
		if !talosAnswers(m.Spec.ManagementAddress) {
			t.Errorf("machine %s (%s) does not answer after server A stopped", m.Metadata.Name, m.Spec.ManagementAddress)
		}
	}
	w.stop()
	b.WaitFor("server B to see the machines disconnected after the world stopped", func() bool {
		return countConnected(b.tenantMachines("staging")) == 0
	})
	startSimWorld(t, world, "--sim-timings", planeTimings)
	b.WaitFor("server B to see the machines connected again after the world started again", func() bool {
		ms := b.tenantMachines("staging")
		return len(ms) == len(machines) && countConnected(ms) == len(ms)
	})
}

// simWorldServing is the line `sim serve` logs once its machines booted.
const simWorldServing = "simulated world serving"

// simWorld is a `rezuscloud sim serve` process.
type simWorld struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	logs bytes.Buffer
}

// startSimWorld runs `rezuscloud sim serve --sim-dir dir` with args and
// waits until it serves. A world still running when the test ends is
// stopped; a failed test logs what it logged.
func startSimWorld(t *testing.T, dir string, args ...string) *simWorld {
	t.Helper()
	w := &simWorld{t: t, done: make(chan struct{})}
	w.cmd = exec.Command(servertest.Binary(t), append([]string{"sim", "serve", "--sim-dir", dir}, args...)...)
	w.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("rezuscloud sim serve: %v", err)
	}
	serving := make(chan struct{})
	go w.read(stderr, serving)
	t.Cleanup(func() {
		if w.running() {
			w.cmd.Process.Signal(syscall.SIGTERM)
			<-w.done
		}
		if t.Failed() {
			t.Logf("rezuscloud sim serve log:\n%s", w.log())
		}
	})
	select {
	case <-serving:
	case <-w.done:
		t.Fatalf("rezuscloud sim serve exited before serving: %v\n%s", w.cmd.ProcessState, w.log())
	case <-time.After(servertest.StartTimeout):
		t.Fatalf("rezuscloud sim serve did not serve within %v:\n%s", servertest.StartTimeout, w.log())
	}
	return w
}

// read keeps the world's log, closes serving at its serving line and done
// once the process has exited.
func (w *simWorld) read(stderr io.Reader, serving chan struct{}) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		w.mu.Lock()
		w.logs.WriteString(line + "\n")
		w.mu.Unlock()
		if strings.Contains(line, "msg=\""+simWorldServing+"\"") {
			select {
			case <-serving:
			default:
				close(serving)
			}
		}
	}
	io.Copy(io.Discard, stderr)
	w.cmd.Wait()
	close(w.done)
}

func (w *simWorld) running() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

func (w *simWorld) log() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

// stop sends SIGTERM and fails the test unless the world exits 0 in time.
func (w *simWorld) stop() {
	w.t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		w.t.Fatalf("rezuscloud sim serve: %v", err)
	}
	select {
	case <-w.done:
	case <-time.After(servertest.StopTimeout):
		w.cmd.Process.Kill()
		<-w.done
		w.t.Fatalf("rezuscloud sim serve did not stop within %v of SIGTERM:\n%s", servertest.StopTimeout, w.log())
	}
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		w.t.Fatalf("rezuscloud sim serve exited %d after SIGTERM, want 0:\n%s", code, w.log())
	}
}

// worldMachines returns the ids of the machine records in a sim dir.
func worldMachines(t *testing.T, dir string) []string {
	t.Helper()
	s, err := sim.OpenExisting(dir)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

// talosAnswers reports whether something accepts connections on the Talos
// port of addr.
func talosAnswers(addr string) bool {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, strconv.Itoa(sim.TalosPort))
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// countConnected counts the machines the plane reaches.
func countConnected(ms []schema.Machine) int {
	n := 0
	for _, m := range ms {
		if m.Status.Connected {
			n++
		}
	}
	return n
}
