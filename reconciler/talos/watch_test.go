package talos

import (
	"context"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// watchRig is a formed tenant whose plane probes once an hour at most,
// so that only watches can bring a change to the store in time, and an
// observer that watches, running until the test ends.
func watchRig(t *testing.T, cps, workers int) *tenantRig {
	t.Helper()
	r := newRig(t)
	tr := r.formed("acme", cps, workers)
	tr.putMachines()
	tr.putTenant()
	opts := r.opts
	opts.Prober = NewProber(r.pool, ProberOptions{TTL: time.Hour, Timeout: 2 * time.Second})
	r.plane = r.newPlane(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.plane.RunObserver(ctx, ObserverOptions{Interval: time.Hour, Watch: true, Bundle: func(string) []byte { return tr.secrets }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "every machine watched and written", func() bool {
		for _, m := range tr.ms {
			if !r.plane.watchedNow(m.ID) || !tr.storedStatus(m.ID).Connected {
				return false
			}
		}
		return true
	})
	return tr
}

// watchedNow reports whether a watch keeps the machine's standing
// observation current.
func (pl *Plane) watchedNow(id string) bool {
	pl.prober.mu.Lock()
	defer pl.prober.mu.Unlock()
	e := pl.prober.entries[id]
	return e != nil && e.watched
}

// within waits up to d for cond, and fails naming what.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// TestWatchBringsAStageChangeAtOnce: with the probe TTL an hour and the
// observer's interval an hour, a machine that turns unready (a service
// fails its health check) and ready again shows in the store within a
// second each time, through its watch alone: no probe is made.
func TestWatchBringsAStageChangeAtOnce(t *testing.T) {
	tr := watchRig(t, 1, 1)
	w := tr.ms[1]
	probes := tr.plane.prober.Probes()
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	took := within(t, time.Second, "the unhealthy worker in the store", func() bool {
		st := tr.storedStatus(w.ID)
		return !st.Ready && st.Stage == schema.StageConfiguring
	})
	t.Logf("unready in the store after %s", took)
	if err := tr.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	took = within(t, time.Second, "the healthy worker in the store", func() bool {
		st := tr.storedStatus(w.ID)
		return st.Ready && st.Stage == schema.StageReady
	})
	t.Logf("ready in the store after %s", took)
	if n := tr.plane.prober.Probes() - probes; n != 0 {
		t.Fatalf("%d probes while every machine was watched, want none", n)
	}
}

// TestWatchFallsBackToProbesAndComesBack: a machine whose connection
// breaks is probed (so its status says it is not connected) while its
// watch is opened again with backoff, and once it answers again the
// watch is back and probing stops.
func TestWatchFallsBackToProbesAndComesBack(t *testing.T) {
	tr := watchRig(t, 1, 1)
	w := tr.ms[1]
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "the refusing worker not connected in the store", func() bool {
		return !tr.storedStatus(w.ID).Connected
	})
	if tr.plane.watchedNow(w.ID) {
		t.Fatal("the refusing worker is still counted as watched")
	}
	if err := tr.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	// The backoff is at 4 s at most by now (2 s, then 4 s).
	within(t, 6*time.Second, "the worker watched and connected again", func() bool {
		return tr.plane.watchedNow(w.ID) && tr.storedStatus(w.ID).Connected
	})
	probes := tr.plane.prober.Probes()
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the unhealthy worker in the store", func() bool { return !tr.storedStatus(w.ID).Ready })
	if n := tr.plane.prober.Probes() - probes; n != 0 {
		t.Fatalf("%d probes once the watch was back, want none", n)
	}
}
