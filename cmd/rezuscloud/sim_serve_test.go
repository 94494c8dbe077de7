package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// TestSimWorldRefusesBadSettings: a server on --sim-world refuses
// --sim-cloud and the settings of the world's own process, and a
// directory that is no simulated world's, which it leaves as it was.
func TestSimWorldRefusesBadSettings(t *testing.T) {
	empty, missing := t.TempDir(), filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"with --sim-cloud", []string{"--sim-world", empty, "--sim-cloud"},
			"give --sim-cloud or --sim-world, not both"},
		{"with the world's settings", []string{"--sim-world", empty, "--sim-timings", "boot=1s", "--sim-kube-bin", "/kube"},
			"--sim-kube-bin, --sim-timings: settings of the simulated world, which 'rezuscloud sim serve' takes, not a server on --sim-world (REZUSCLOUD_SIM_WORLD)"},
		{"an empty directory", []string{"--sim-world", empty},
			"--sim-world: not a sim dir: " + empty + " holds no sim.json: give the --sim-dir of a running 'rezuscloud sim serve', which makes it"},
		{"a missing directory", []string{"--sim-world", missing},
			"--sim-world: not a sim dir: " + missing + " does not exist"},
	} {
		f := testServeFlags(t, servertest.Options{Dir: t.TempDir(), Args: c.args})
		m := NewMain(f, slog.New(slog.DiscardHandler))
		err := m.Open()
		if err == nil {
			m.Close()
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if entries, err := os.ReadDir(empty); err != nil || len(entries) != 0 {
		t.Errorf("the empty directory now holds %d entries (%v)", len(entries), err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the missing directory was made: %v", err)
	}
}

// TestSimServeWorldServesAServer runs the world of `sim serve`, with a
// simulated OpenStack, and a server on --sim-world in this process: the
// world says it serves once its machines booted, names the OpenStack's
// clouds.yaml, and holds its block, so that a second world on its dir is
// refused; the server, given that clouds.yaml,
// runs the sim provider's class against the world's dir but hosts no node
// of its own;
// the world stops when its context ends and releases its block.
func TestSimServeWorldServesAServer(t *testing.T) {
	dir, osDir := filepath.Join(t.TempDir(), "world"), filepath.Join(t.TempDir(), "openstack")
	var logs syncBuffer
	wf := &simServeFlags{dir: dir, timings: "boot=100ms", openstack: cloudFlags{simOpenStack: osDir, simAddresses: "127.3.0.0/16"}}
	w, err := openSimWorld(wf, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- w.serve(ctx) }()
	waitFor(t, "the world to say it serves", func() bool { return strings.Contains(logs.String(), "simulated world serving") })
	clouds := filepath.Join(osDir, "clouds.yaml")
	if !strings.Contains(logs.String(), "clouds="+clouds) {
		t.Errorf("the serving line does not name the simulated OpenStack's clouds.yaml %s:\n%s", clouds, logs.String())
	}
	store, err := sim.OpenExisting(dir)
	if err != nil || !store.Served() {
		t.Fatalf("the world's dir %s: %v, served %v", dir, err, err == nil && store.Served())
	}

	settings, _ := os.ReadFile(filepath.Join(dir, "sim.json"))
	if w2, err := openSimWorld(&simServeFlags{dir: dir}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "is held by a live process") {
		if err == nil {
			w2.Close()
		}
		t.Errorf("a second world on %s: %v, want it refused", dir, err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "sim.json")); !bytes.Equal(again, settings) {
		t.Errorf("a second world changed the sim dir's settings: %s, were %s", again, settings)
	}

	f := testServeFlags(t, servertest.Options{Dir: t.TempDir(), Args: []string{"--sim-world", dir, "--openstack-clouds", clouds}})
	m := NewMain(f, slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	if m.rec.nodes != nil || m.rec.simDir != dir || m.rec.disabledClasses() != nil {
		t.Errorf("server on --sim-world: nodes %v, sim dir %q (want %q), disabled classes %v", m.rec.nodes, m.rec.simDir, dir, m.rec.disabledClasses())
	}
	m.Close()

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the world did not stop after its context ended")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if store.Served() {
		t.Errorf("block %s still held after the world closed", store.Block())
	}
}

// TestSimServeNeedsADir: `sim serve` without --sim-dir says how to give it.
func TestSimServeNeedsADir(t *testing.T) {
	err := runSimServe(context.Background(), &simServeFlags{logLevel: "info", logFormat: "text"}, new(bytes.Buffer))
	if want := "no sim dir: give --sim-dir or REZUSCLOUD_SIM_DIR"; err == nil || err.Error() != want {
		t.Errorf("sim serve without a dir: %v, want %q", err, want)
	}
}

// syncBuffer is a buffer that a logger writes while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits up to a minute until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
