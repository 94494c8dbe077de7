package tofu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TestMain makes this test binary the guard when it runs as one, as the
// server's binary does (`rezuscloud tofu-guard`).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == GuardCommand {
		os.Exit(Guard(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// guardedConfig applies "first", then "slow" for slow, then "late".
func guardedConfig(slow time.Duration) string {
	return `resource "terraform_data" "first" { input = "a" }
resource "terraform_data" "slow" {
  depends_on = [terraform_data.first]
  provisioner "local-exec" { command = "sleep ` + strings.TrimSuffix(slow.String(), "s") + `" }
}
resource "terraform_data" "late" {
  depends_on = [terraform_data.slow]
  input      = "b"
}
`
}

// guardedRig is a runner whose applies run under this test binary as
// the guard, with the deadline until returns.
func guardedRig(t *testing.T, until func() time.Time) (*Runner, string) {
	t.Helper()
	cli := filepath.Join(t.TempDir(), "cli.tfrc")
	if err := os.WriteFile(cli, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{Binary: testenv.Tofu(t), CLIConfigFile: cli, InterruptDelay: 30 * time.Second,
		Guard: []string{os.Args[0], GuardCommand}, ActUntil: until})
	if err != nil {
		t.Fatal(err)
	}
	return r, t.TempDir()
}

// TestGuardInterruptsAnUnrenewedApply: a server that stops renewing its
// deadline (paused: it tells the guard nothing more) has its apply
// interrupted by the guard at that deadline, though nothing in the
// server cancels it: tofu saves what it made and makes nothing after.
// A server that renews it has its apply run to the end.
func TestGuardInterruptsAnUnrenewedApply(t *testing.T) {
	t.Run("renewed", func(t *testing.T) {
		r, dir := guardedRig(t, func() time.Time { return time.Now().Add(time.Second) })
		writeTF(t, dir, guardedConfig(3*time.Second))
		if _, err := r.Apply(context.Background(), dir, []byte("v1"), nil, Creds{}); err != nil {
			t.Fatalf("a renewed apply failed: %v", err)
		}
		if !stateHas(t, dir, "late") {
			t.Error("a renewed apply did not make its last resource")
		}
	})
	t.Run("paused", func(t *testing.T) {
		// The deadline given at the start, one renewal, then silence, as
		// from a server that SIGSTOP paused.
		var calls atomic.Int32
		start := time.Now()
		r, dir := guardedRig(t, func() time.Time {
			if calls.Add(1) <= 3 {
				return start.Add(2 * time.Second)
			}
			return start.Add(2*time.Second + time.Millisecond) // never later
		})
		writeTF(t, dir, guardedConfig(6*time.Second))
		_, err := r.Apply(context.Background(), dir, []byte("v1"), nil, Creds{})
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "tofu was interrupted") {
			t.Fatalf("an apply past its deadline: %v, want the guard's interruption", err)
		}
		if !stateHas(t, dir, "first") {
			t.Error("the interrupted apply did not save what it made before the deadline")
		}
		if stateHas(t, dir, "late") {
			t.Error("the interrupted apply made a resource after its deadline")
		}
		t.Logf("the apply ended %s after it started, with its deadline 2 s after", took)
	})
	t.Run("fenced", func(t *testing.T) {
		// A server that may not act any more says so with the zero time.
		var fenced atomic.Bool
		r, dir := guardedRig(t, func() time.Time {
			if fenced.Load() {
				return time.Time{}
			}
			return time.Now().Add(time.Minute)
		})
		writeTF(t, dir, guardedConfig(6*time.Second))
		time.AfterFunc(time.Second, func() { fenced.Store(true) })
		_, err := r.Apply(context.Background(), dir, []byte("v1"), nil, Creds{})
		if err == nil || !strings.Contains(err.Error(), "tofu was interrupted") || stateHas(t, dir, "late") {
			t.Fatalf("an apply of a fenced server: %v (late made: %v), want the guard's interruption before it", err, stateHas(t, dir, "late"))
		}
	})
}

// TestGuardInterruptsOnce: a replica that fences itself cancels its run
// at the deadline the guard holds too, so both interrupt at once; tofu
// gets one interrupt, stops and saves its state. A second interrupt
// would make it exit at once, without saving.
func TestGuardInterruptsOnce(t *testing.T) {
	var until atomic.Int64
	until.Store(time.Now().Add(time.Minute).UnixNano())
	r, dir := guardedRig(t, func() time.Time { return time.Unix(0, until.Load()) })
	writeTF(t, dir, guardedConfig(6*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := filepath.Join(dir, runOutput)
	go func() {
		// Once "slow" runs, the lease stops being renewed: the guard's
		// deadline and the server's own fence (its cancel) fall together.
		for !strings.Contains(readFile(out), "terraform_data.slow: Provisioning") {
			time.Sleep(10 * time.Millisecond)
		}
		at := time.Now().Add(300 * time.Millisecond)
		until.Store(at.UnixNano())
		time.AfterFunc(time.Until(at), cancel)
	}()
	_, err := r.Apply(ctx, dir, []byte("v1"), nil, Creds{})
	if err == nil {
		t.Fatal("an apply fenced and cancelled in the middle succeeded")
	}
	if strings.Contains(err.Error(), "Two interrupts received") || !stateHas(t, dir, "first") || stateHas(t, dir, "late") {
		t.Fatalf("fenced and cancelled at once: %v (first saved %t, late made %t); want one interrupt, the state saved, nothing after", err, stateHas(t, dir, "first"), stateHas(t, dir, "late"))
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestGuardArgs: the guard refuses a command line it cannot follow.
func TestGuardArgs(t *testing.T) {
	var out strings.Builder
	if code := Guard([]string{"tofu", "apply"}, &out); code != 2 || !strings.Contains(out.String(), "usage") {
		t.Errorf("guard without --until: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := Guard([]string{"--until", "soon", "--", "tofu"}, &out); code != 2 || !strings.Contains(out.String(), "Unix nanoseconds") {
		t.Errorf("guard with a bad deadline: exit %d, %q", code, out.String())
	}
}

// BenchmarkGuardOverhead: an apply of one resource, as a server alone
// runs it and as a replica runs it under the guard; the difference is the
// guard's process and pipe.
func BenchmarkGuardOverhead(b *testing.B) {
	for _, guarded := range []bool{false, true} {
		name := "alone"
		if guarded {
			name = "guarded"
		}
		b.Run(name, func(b *testing.B) {
			cli := filepath.Join(b.TempDir(), "cli.tfrc")
			if err := os.WriteFile(cli, nil, 0o600); err != nil {
				b.Fatal(err)
			}
			opts := Options{Binary: testenv.Tofu(b), CLIConfigFile: cli}
			if guarded {
				opts.Guard = []string{os.Args[0], GuardCommand}
				opts.ActUntil = func() time.Time { return time.Now().Add(time.Minute) }
			}
			r, err := NewRunner(opts)
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			for i := 0; b.Loop(); i++ {
				body := `resource "terraform_data" "x" { input = "` + strconv.Itoa(i) + `" }`
				if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(body), 0o600); err != nil {
					b.Fatal(err)
				}
				if _, err := r.Apply(context.Background(), dir, []byte("v1"), nil, Creds{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
