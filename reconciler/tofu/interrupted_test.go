package tofu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestRunnerLooksForMarkersOnce: a runner looks for the markers of an
// interrupted run in a work directory once, and again only after one of
// its own runs used the directory; while a run is open there, it looks
// every time.
func TestRunnerLooksForMarkersOnce(t *testing.T) {
	r, dir := approveRig(t)
	errored := filepath.Join(dir, ErroredState)
	if r.Interrupted(dir) {
		t.Fatal("Interrupted in an empty work directory")
	}
	// Only tofu writes errored.tfstate; one written behind the runner's back
	// shows only after the runner's next use of the directory.
	if err := os.WriteFile(errored, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r.Interrupted(dir) {
		t.Fatal("the runner looked at the work directory again although nothing of it ran there")
	}
	if err := r.WaitIdle(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted(dir) {
		t.Fatal("errored.tfstate not found after a use of the directory")
	}
	s, err := r.open(context.Background(), dir, Creds{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(errored); err != nil {
		t.Fatal(err)
	}
	if r.Interrupted(dir) {
		t.Error("Interrupted while a session is open does not look at the directory")
	}
	if err := os.WriteFile(errored, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted(dir) {
		t.Error("Interrupted while a session is open does not look at the directory")
	}
	_ = os.Remove(errored)
	s.close()
	if r.Interrupted(dir) {
		t.Error("errored.tfstate, removed during the session, still found after it")
	}
	other, _ := approveRig(t)
	if err := os.WriteFile(errored, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !other.Interrupted(dir) {
		t.Error("a new runner did not find errored.tfstate at its first look")
	}
}

// TestInterruptedAfterKill: a server process killed while its detached
// tofu apply runs leaves that tofu running; the runner of the next process
// finds the apply at its first look. The killed process is this test's
// binary, run again as killedApplyHelper; its tofu is the real one behind
// a script that waits before the apply.
func TestInterruptedAfterKill(t *testing.T) {
	if os.Getenv("REZUSCLOUD_KILLED_APPLY_DIR") != "" {
		killedApplyHelper(t)
		return
	}
	_, dir := approveRig(t)
	pidFile := filepath.Join(t.TempDir(), "tofu.pid")
	wrapper := filepath.Join(t.TempDir(), "tofu")
	script := "#!/bin/sh\nif [ \"$1\" = apply ]; then echo $$ > '" + pidFile + "'; sleep 30; fi\nexec '" + testenv.Tofu(t) + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	writeTF(t, dir, `resource "terraform_data" "keep" { input = "a" }`)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestInterruptedAfterKill$")
	cli := filepath.Join(t.TempDir(), "cli.tfrc") // the killed helper leaves no temporary directory of its own
	if err := os.WriteFile(cli, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "REZUSCLOUD_KILLED_APPLY_DIR="+dir, "REZUSCLOUD_KILLED_APPLY_TOFU="+wrapper, "REZUSCLOUD_KILLED_APPLY_CLI="+cli)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(60 * time.Second); pid == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the helper's tofu apply did not start")
		}
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	r, _ := approveRig(t)
	if !r.Interrupted(dir) || !ApplyRunning(dir) {
		t.Fatalf("after the kill: Interrupted %v, ApplyRunning %v; want both", r.Interrupted(dir), ApplyRunning(dir))
	}
	if !r.Interrupted(dir) {
		t.Fatal("a second look forgot the interrupted apply")
	}
}

// killedApplyHelper is the process TestInterruptedAfterKill kills: it
// applies in the directory it is given, with the tofu and CLI config it
// is given.
func killedApplyHelper(t *testing.T) {
	r, err := NewRunner(Options{Binary: os.Getenv("REZUSCLOUD_KILLED_APPLY_TOFU"), CLIConfigFile: os.Getenv("REZUSCLOUD_KILLED_APPLY_CLI")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Apply(context.Background(), os.Getenv("REZUSCLOUD_KILLED_APPLY_DIR"), []byte("v1"), nil, Creds{})
	t.Fatalf("the apply ended before the kill: %v", err)
}
