package talos

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// TestEventsBringMachinesBeyondTheBound: with one machine watched (the
// tenant's control plane) and the probe TTL an hour, the workers beyond
// the bound follow by one events stream through the control plane, on the
// stream connection that its watch holds: a worker's turn to unready and back,
// and a new address, reach the store within a second, each by one probe
// of that worker; a worker that goes down shows as not connected at once,
// and once it is back it joins the stream again, so that its next change
// comes as soon.
func TestEventsBringMachinesBeyondTheBound(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 3)
	tr.putMachines()
	tr.putTenant()
	workers := tr.ms[1:]
	r.observeWith(t, time.Hour, ObserverOptions{Interval: time.Hour, Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	within(t, 5*time.Second, "every worker probed and written ready, and on the events stream", func() bool {
		for _, w := range workers {
			if st := tr.storedStatus(w.ID); !st.Connected || !st.Ready || r.plane.watchedNow(w.ID) || !r.plane.onEventsNow(w.ID) {
				return false
			}
		}
		return r.plane.eventsOpen("acme")
	})
	if n := r.pool.StreamConns(); n != 1 {
		t.Fatalf("%d stream connections; want the watched control plane's alone, which the events stream shares", n)
	}
	r.plane.promptsSettle(t)
	w := workers[1]
	for i, fault := range []talosnode.Fault{{Unhealthy: "kubelet"}, {}} {
		probes := r.plane.Probes()
		if err := tr.host.SetFault(w.ID, fault); err != nil {
			t.Fatal(err)
		}
		want := fault.Unhealthy == ""
		took := within(t, time.Second, fmt.Sprintf("change %d of the worker in the store", i+1), func() bool { return tr.storedStatus(w.ID).Ready == want })
		t.Logf("change %d in the store after %s", i+1, took)
		if n := r.plane.Probes() - probes; n != 1 {
			t.Errorf("change %d: %d probes, want the one its event made", i+1, n)
		}
	}
	extra := netip.MustParsePrefix("127.200.0.3/8")
	if err := tr.host.SetInventory(w.ID, func(inv *talosnode.Inventory) { inv.Addresses = append(inv.Addresses, extra) }); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the new address in the store", func() bool {
		n := tr.storedStatus(w.ID).Network
		return n != nil && slices.Contains(n.Addresses, extra.String())
	})

	if err := tr.host.SetFault(w.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 3*time.Second, "the refusing worker not connected in the store", func() bool { return !tr.storedStatus(w.ID).Connected })
	if err := tr.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	// It joins the stream again after watchRetryMin, and is probed then.
	within(t, watchRetryMin+3*time.Second, "the worker connected again in the store", func() bool { return tr.storedStatus(w.ID).Connected })
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the rejoined worker's change in the store", func() bool { return !tr.storedStatus(w.ID).Ready })
}

// TestEventsReplayWhatChangedBeforeTheStream: a worker that changed
// after its probe and before its tenant's events stream first opened
// (here, while the control plane that carries the stream refused) shows
// that change in the store as soon as it joins the stream, by the
// stream's tail, with the probe TTL an hour.
func TestEventsReplayWhatChangedBeforeTheStream(t *testing.T) {
	r := newRig(t)
	tr := acmeWithFaultyControlPlane(t, r, talosnode.Fault{Refuse: true})
	cp, w := tr.ms[0], tr.ms[1]
	r.observeWith(t, time.Hour, ObserverOptions{Interval: 50 * time.Millisecond, Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	within(t, 5*time.Second, "the workers probed and written ready, with no events stream", func() bool {
		for _, w := range tr.ms[1:] {
			if st := tr.storedStatus(w.ID); !st.Connected || !st.Ready || r.plane.onEventsNow(w.ID) {
				return false
			}
		}
		return !r.plane.eventsOpen("acme")
	})
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	// The control plane's watch opens again after its backoff.
	within(t, 2*watchRetryMax, "the worker on the events stream", func() bool { return r.plane.onEventsNow(w.ID) })
	took := within(t, time.Second, "the worker's change in the store", func() bool { return !tr.storedStatus(w.ID).Ready })
	t.Logf("in the store %s after it joined the stream", took)
}

// TestEventsProbeAMachineReadWhileTheirStreamOpened: a tenant's events
// stream that opens before any of its machines was read (as at the
// server's start) asks for no tail; its control plane's apid holds it
// 1.5 s, during which the first pass reads a worker, which then turns
// unready before it joins the stream. As it joins, it is probed, so the
// change shows in the store, with the probe TTL an hour.
func TestEventsProbeAMachineReadWhileTheirStreamOpened(t *testing.T) {
	r := newRig(t)
	tr := acmeWithFaultyControlPlane(t, r, talosnode.Fault{EventsDelay: 1500 * time.Millisecond})
	w := tr.ms[1]
	r.observeWith(t, time.Hour, ObserverOptions{Interval: time.Hour, Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	within(t, 5*time.Second, "the worker read", func() bool {
		_, ok := r.plane.prober.Last(w.ID)
		return ok
	})
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	if r.plane.onEventsNow(w.ID) {
		t.Log("the worker joined its stream before it changed: its event brings the change")
	}
	within(t, 5*time.Second, "the worker on the events stream", func() bool { return r.plane.onEventsNow(w.ID) })
	within(t, time.Second, "the worker's change in the store", func() bool { return !tr.storedStatus(w.ID).Ready })
}

// TestEventsProbeAMachineBeingReadAsItJoins: the control plane's apid
// holds the events stream a second, and the worker's first probe reads
// its MachineStatus, which the worker answers 3 s later (StatusDelay).
// Meanwhile the worker turns unready and joins the stream, which opened
// without a tail since none of its machines had been read: that change
// came by no event, and the probe in flight tells the worker ready. The
// worker is probed again after that probe, which brings the change.
func TestEventsProbeAMachineBeingReadAsItJoins(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	tr.putMachines()
	tr.putTenant()
	cp, w := tr.ms[0], tr.ms[1]
	const held = 3 * time.Second
	for id, f := range map[string]talosnode.Fault{cp.ID: {EventsDelay: time.Second}, w.ID: {StatusDelay: held}} {
		if err := tr.host.SetFault(id, f); err != nil {
			t.Fatal(err)
		}
	}
	r.observeProbing(t, ProberOptions{TTL: time.Hour, Timeout: 10 * time.Second}, ObserverOptions{Interval: time.Hour, Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	within(t, 5*time.Second, "the worker's first probe", func() bool { return r.plane.prober.readOrReading(w.ID) })
	time.Sleep(held / 4) // the probe's read of the worker's status is held
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	if r.plane.onEventsNow(w.ID) {
		t.Log("the worker joined its stream before it changed: its event brings the change")
	}
	within(t, 5*time.Second, "the worker on the events stream", func() bool { return r.plane.onEventsNow(w.ID) })
	if _, read := r.plane.prober.Last(w.ID); read {
		t.Log("the worker's first probe answered before it joined its stream: it is probed as it joins")
	}
	within(t, held+3*time.Second, "the worker's change in the store", func() bool {
		st := tr.storedStatus(w.ID)
		return st.Connected && !st.Ready
	})
}

// acmeWithFaultyControlPlane forms tenant acme, a control plane and two
// workers, stored, with fault f on its control plane.
func acmeWithFaultyControlPlane(t *testing.T, r *rig, f talosnode.Fault) *tenantRig {
	t.Helper()
	tr := r.formed("acme", 1, 2)
	tr.putMachines()
	tr.putTenant()
	if err := tr.host.SetFault(tr.ms[0].ID, f); err != nil {
		t.Fatal(err)
	}
	return tr
}

// promptsSettle waits until the plane's events have prompted no probe
// for 200 ms and none is in flight: the replay of the events a stream's
// first open asked for (its tail: those of the machines' boot, here)
// comes right after each machine's first message, and its prompts are
// done.
func (pl *Plane) promptsSettle(t *testing.T) {
	t.Helper()
	within(t, 10*time.Second, "the events' prompts done", func() bool {
		n := pl.watches.prompts.Load()
		time.Sleep(200 * time.Millisecond)
		return pl.watches.prompts.Load() == n && pl.watches.prompting.Load() == 0
	})
}

// eventsOpen reports whether the tenant has an events stream.
func (pl *Plane) eventsOpen(tenant string) bool {
	pl.watches.mu.Lock()
	defer pl.watches.mu.Unlock()
	return pl.watches.events[tenant] != nil
}

// TestEventsStandInForTimedProbes: with the probe TTL 100 ms, the workers
// beyond the bound that are on their tenant's events stream are not
// probed on the TTL; once the control plane that carries the stream
// refuses, they are again.
func TestEventsStandInForTimedProbes(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 3)
	tr.putMachines()
	tr.putTenant()
	cp, workers := tr.ms[0], tr.ms[1:]
	r.observeWith(t, 100*time.Millisecond, ObserverOptions{Interval: 50 * time.Millisecond, Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	within(t, 5*time.Second, "every worker probed, written and on the events stream", func() bool {
		for _, w := range workers {
			if !r.plane.onEventsNow(w.ID) || !tr.storedStatus(w.ID).Connected {
				return false
			}
		}
		return true
	})
	r.plane.promptsSettle(t)
	probes := r.plane.Probes()
	time.Sleep(time.Second)
	if n := r.plane.Probes() - probes; n != 0 {
		t.Fatalf("%d probes in a second of workers on the events stream, want none", n)
	}
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 3*time.Second, "the workers probed on the TTL again", func() bool {
		for _, w := range workers {
			if r.plane.onEventsNow(w.ID) {
				return false
			}
		}
		return r.plane.Probes()-probes > int64(3*len(workers))
	})
}

// onEventsNow reports whether an events stream brings the machine's
// changes.
func (pl *Plane) onEventsNow(id string) bool { return pl.prober.onStream(id) }

// TestEventsWithoutAWatchedControlPlane: with one machine watched, the
// first tenant's control plane, the second tenant has none watched; its
// events stream goes through its control plane anyway and covers that
// control plane too, on a stream connection of its own, so a change of either
// of its machines reaches the store within a second with the probe TTL an
// hour.
func TestEventsWithoutAWatchedControlPlane(t *testing.T) {
	r := newRig(t)
	acme, beta := r.formed("acme", 1, 1), r.formed("beta", 1, 2)
	for _, tr := range []*tenantRig{acme, beta} {
		tr.putMachines()
		tr.putTenant()
	}
	bundles := map[string][]byte{"acme": acme.secrets, "beta": beta.secrets}
	r.observeWith(t, time.Hour, ObserverOptions{Interval: time.Hour, Watch: true, MaxWatched: 1, Bundle: func(t string) []byte { return bundles[t] }})
	within(t, 5*time.Second, "beta's machines on its events stream, none watched", func() bool {
		for _, m := range beta.ms {
			if r.plane.watchedNow(m.ID) || !r.plane.onEventsNow(m.ID) || !beta.storedStatus(m.ID).Ready {
				return false
			}
		}
		return true
	})
	for _, m := range []Machine{beta.ms[0], beta.ms[2]} {
		if err := beta.host.SetFault(m.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
			t.Fatal(err)
		}
		took := within(t, time.Second, "the unhealthy "+m.ID+" in the store", func() bool { return !beta.storedStatus(m.ID).Ready })
		t.Logf("%s unready in the store after %s", m.ID, took)
	}
	if n := r.pool.StreamConns(); n != 2 {
		t.Fatalf("%d stream connections; want one for each tenant's control plane", n)
	}
}

// observeWith runs a plane for r with a prober of TTL ttl and an observer
// with oo, until the test ends.
func (r *rig) observeWith(t *testing.T, ttl time.Duration, oo ObserverOptions) {
	t.Helper()
	r.observeProbing(t, ProberOptions{TTL: ttl, Timeout: 2 * time.Second}, oo)
}

// observeProbing is observeWith with the prober's options po.
func (r *rig) observeProbing(t *testing.T, po ProberOptions, oo ObserverOptions) {
	t.Helper()
	opts := r.opts
	opts.Prober = NewProber(r.pool, po)
	r.plane = r.newPlane(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.plane.RunObserver(ctx, oo)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// TestEventsOpenAfreshPastAStalledConnection: a tenant's events stream
// that would open on a connection that has stopped answering without
// closing (its control plane answers on new ones) gets no first message
// within the prober's timeout; that connection is closed, and the stream
// opens on a new one, which brings the worker's change.
func TestEventsOpenAfreshPastAStalledConnection(t *testing.T) {
	r := newRig(t)
	acme, beta := r.formed("acme", 1, 0), r.formed("beta", 1, 1)
	stalledStreams(t, r, "beta", beta.secrets, &beta.ms[0].Address)
	for _, tr := range []*tenantRig{acme, beta} {
		tr.putMachines()
		tr.putTenant()
	}
	bundles := map[string][]byte{"acme": acme.secrets, "beta": beta.secrets}
	r.observeWith(t, time.Hour, ObserverOptions{Interval: time.Hour, Watch: true, MaxWatched: 1, Bundle: func(t string) []byte { return bundles[t] }})
	w := beta.ms[1]
	// Without the closing, the stream would wait on the stalled
	// connection until its keepalive, minutes later.
	within(t, 10*time.Second, "beta's worker on its events stream", func() bool { return r.plane.onEventsNow(w.ID) })
	if err := beta.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the unhealthy worker in the store", func() bool { return !beta.storedStatus(w.ID).Ready })
}
