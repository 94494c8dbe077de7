package tofu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWaitIdle: waitIdle returns only once no process holds the flock of
// the run output, and then removes the file; a cancelled wait says what it
// waited for.
func TestWaitIdle(t *testing.T) {
	dir := t.TempDir()
	if err := waitIdle(context.Background(), dir); err != nil {
		t.Fatalf("waitIdle without a run: %v", err)
	}
	path := filepath.Join(dir, runOutput)
	held, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := flock(held, syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if !ApplyRunning(dir) {
		t.Fatal("ApplyRunning = false while the output is locked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := waitIdle(ctx, dir); err == nil || !strings.Contains(err.Error(), "earlier run") {
		t.Fatalf("waitIdle while locked: %v, want a timeout naming the earlier run", err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- waitIdle(context.Background(), dir) }()
	time.Sleep(400 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("waitIdle returned while the output was locked: %v", err)
	default:
	}
	held.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 400*time.Millisecond {
		t.Error("waitIdle did not wait")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) || ApplyRunning(dir) {
		t.Errorf("after waitIdle: output %v, running %v", err, ApplyRunning(dir))
	}
}
