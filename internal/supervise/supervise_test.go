//go:build linux

package supervise

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain makes this test binary the supervisor when it runs as one:
// `supervise WAIT -- COMMAND ARGS...`.
func TestMain(m *testing.M) {
	if len(os.Args) > 3 && os.Args[1] == "supervise" && os.Args[3] == "--" {
		wait, err := time.ParseDuration(os.Args[2])
		if err != nil {
			os.Exit(2)
		}
		os.Exit(Run(os.Args[4:], wait, os.Stderr))
	}
	os.Exit(m.Run())
}

// supervisor returns the command that runs script under the supervisor
// with wait.
func supervisor(wait time.Duration, script string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "supervise", wait.String(), "--", "/bin/sh", "-c", script)
	cmd.Stderr = os.Stderr
	return cmd
}

func exitOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("the supervisor: %v", err)
	}
	return ee.ExitCode()
}

// TestSuperviseWaitsForLeftovers: the supervisor exits with the server's
// code once the process the server left running has ended too, as a
// tofu apply that outlives a crash does; without the supervisor's wait,
// the file that process writes last would not be there.
func TestSuperviseWaitsForLeftovers(t *testing.T) {
	done := filepath.Join(t.TempDir(), "done")
	start := time.Now()
	err := supervisor(time.Minute, "(sleep 1; echo saved > '"+done+"') & exit 3").Run()
	if code := exitOf(t, err); code != 3 {
		t.Errorf("exit code %d, want the server's 3", code)
	}
	if b, err := os.ReadFile(done); err != nil || strings.TrimSpace(string(b)) != "saved" {
		t.Errorf("the supervisor exited before the process the server left: %v %q", err, b)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the supervisor exited after %s, before the 1 s the leftover process took", d)
	}
}

// TestSuperviseWaitsAtMost: a leftover that runs on past the wait is
// left, and the supervisor exits then.
func TestSuperviseWaitsAtMost(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	err := supervisor(500*time.Millisecond, "sleep 30 & echo $! > '"+pidFile+"'; exit 0").Run()
	if b, rerr := os.ReadFile(pidFile); rerr == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if code := exitOf(t, err); code != 0 {
		t.Errorf("exit code %d, want the server's 0", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the supervisor waited %s for a leftover, want about its wait of 500ms", d)
	}
}

// TestSuperviseSignals: SIGTERM to the supervisor reaches the server,
// whose exit code it returns; a server killed by a signal gives 128 and
// the signal's number.
func TestSuperviseSignals(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := supervisor(time.Minute, "trap 'exit 7' TERM; touch '"+ready+"'; while :; do sleep 0.05; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the server under the supervisor did not start")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, cmd.Wait()); code != 7 {
		t.Errorf("after SIGTERM: exit code %d, want the server's 7 from its trap", code)
	}
	if code := exitOf(t, supervisor(time.Minute, "kill -9 $$").Run()); code != 128+9 {
		t.Errorf("a server killed by SIGKILL: exit code %d, want 137", code)
	}
}
