package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestSimCloudSetting: the simulated cloud runs only with --sim-cloud, as a
// flag, an environment variable or a config key; every demo sets it; its
// other settings are refused without it.
func TestSimCloudSetting(t *testing.T) {
	if serveSettings(t, nil).simCloud {
		t.Error("the simulated cloud runs by default")
	}
	file := filepath.Join(t.TempDir(), "rezuscloud.yaml")
	if err := os.WriteFile(file, []byte("sim-cloud: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*serveFlags{
		"flag":        serveSettings(t, nil, "--sim-cloud"),
		"environment": serveSettings(t, map[string]string{"REZUSCLOUD_SIM_CLOUD": "true"}),
		"config file": serveSettings(t, nil, "--config", file),
	} {
		if !f.simCloud {
			t.Errorf("with the setting in the %s, the simulated cloud does not run", name)
		}
	}
	for cloud := range demoClouds() {
		if f := demoServeFlags(&demoFlags{cloud: cloud}, t.TempDir(), "repo", os.Getenv); !f.simCloud {
			t.Errorf("demo --cloud %s runs without the simulated cloud", cloud)
		}
	}
	f := serveSettings(t, nil, "--sim-timings", "boot=1s", "--sim-dir", "/tmp/sim")
	err := simSettingsWithoutSimCloud(f)
	if want := "--sim-dir, --sim-timings: settings of the simulated cloud, which runs only with --sim-cloud (REZUSCLOUD_SIM_CLOUD=true)"; err == nil || err.Error() != want {
		t.Errorf("--sim-dir and --sim-timings without --sim-cloud: %v, want %q", err, want)
	}
}

// TestSimCloudOnlyWithFlag boots the server that serve runs, reconciling an
// empty directory: without --sim-cloud no goroutine of the simulators runs
// and no sim dir exists, and the sim tenants' class is disabled; with it
// the simulated Talos nodes run, in the sim dir beside the data dir.
func TestSimCloudOnlyWithFlag(t *testing.T) {
	for _, simCloud := range []bool{false, true} {
		f := testServeFlags(t, servertest.Options{Dir: t.TempDir(), SimCloud: simCloud})
		m := NewMain(f, slog.New(slog.DiscardHandler))
		if err := m.Open(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- m.Run(ctx) }()
		waitReady(t, m.Server.URL())

		goroutines := simGoroutines()
		_, dirErr := os.Stat(defaultSimDir(f.data))
		switch {
		case !simCloud && (goroutines != "" || m.rec.nodes != nil):
			t.Errorf("without --sim-cloud the simulators run:\n%s", goroutines)
		case !simCloud && !os.IsNotExist(dirErr):
			t.Errorf("without --sim-cloud the sim dir %s exists (%v)", defaultSimDir(f.data), dirErr)
		case !simCloud && !strings.Contains(m.rec.disabledClasses()["sim"], "--sim-cloud (REZUSCLOUD_SIM_CLOUD=true)"):
			t.Errorf("without --sim-cloud the sim class is not disabled, or its message does not name the setting: %q", m.rec.disabledClasses())
		case simCloud && (goroutines == "" || dirErr != nil || m.rec.disabledClasses() != nil):
			t.Errorf("with --sim-cloud: simulator goroutines %q, sim dir %v, disabled classes %v", goroutines, dirErr, m.rec.disabledClasses())
		}
		cancel()
		select {
		case err := <-ran:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

// simGoroutines returns the stacks of the goroutines that run code of the
// simulators (internal/sim and below), "" when none does.
func simGoroutines() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "/rezuscloud/internal/sim/") || strings.Contains(g, "/rezuscloud/internal/sim.") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// waitReady waits until the server at url answers /readyz with 200: its
// source has been read once.
func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz: not ready after a minute (%v)", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
