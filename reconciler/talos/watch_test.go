package talos

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// watchRig is a formed tenant whose plane probes once an hour at most,
// so that only watches can bring a change to the store in time, and an
// observer that watches, running until the test ends.
func watchRig(t *testing.T, cps, workers int) *tenantRig {
	t.Helper()
	return watchRigWith(t, cps, workers, ObserverOptions{})
}

// watchRigWith is watchRig with the observer's options, whose Interval,
// Watch and Bundle it sets.
func watchRigWith(t *testing.T, cps, workers int, oo ObserverOptions) *tenantRig {
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
		oo.Interval, oo.Watch, oo.Bundle = time.Hour, true, func(string) []byte { return tr.secrets }
		r.plane.RunObserver(ctx, oo)
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
	return e != nil && e.watches > 0
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

// TestWatchBringsTheInventory: the inventory of machines of each kind of
// simulated shape reaches the store as status.hardware, network and
// schematic, with the derived labels: a sim record's shape (the default
// small, and large), an OpenStack flavor's sizes, and a bare-metal
// machine waiting in maintenance mode.
func TestWatchBringsTheInventory(t *testing.T) {
	tr := watchRig(t, 1, 1)
	cp, w := tr.ms[0], tr.ms[1]
	// The machines booted with the default hardware: a small sim machine.
	st := tr.storedStatus(w.ID)
	checkInventory(t, "small sim worker", st, 2, 4<<10, "vda", 40<<30)
	if n := st.Network; n == nil || !slices.Contains(n.Addresses, w.Address+"/8") || len(n.DefaultGateways) != 1 ||
		len(n.Links) != 1 || n.Links[0].HardwareAddress == "" || !n.Links[0].Up || n.Hostname == "" {
		t.Errorf("small sim worker's network: %+v", n)
	}
	if s := st.Schematic; s == nil || len(s.ID) != 64 || len(s.Extensions) == 0 {
		t.Errorf("small sim worker's schematic: %+v", s)
	}
	labels := tr.storedLabels(w.ID)
	if labels[schema.LabelHardwareCPUs] != "2" || labels[schema.LabelHardwareMemoryGiB] != "4" || labels[schema.LabelHardwareArch] != "amd64" ||
		labels[schema.LabelHardwareSystemDiskGiB] != "40" {
		t.Errorf("small sim worker's labels: %v", labels)
	}
	checkInventory(t, "small sim control plane", tr.storedStatus(cp.ID), 2, 4<<10, "vda", 40<<30)

	// A large sim machine and an OpenStack flavor (8 vCPUs, 16 GiB,
	// 100 GB) join the tenant.
	large, flavor := talosnode.ShapeHardware("large"), talosnode.VMHardware(8, 16<<10, 100)
	added := []struct {
		m  Machine
		hw talosnode.Hardware
	}{{Machine{ID: "acme-large", Name: "rezussim_machine.ng_w[1]", NodeGroup: "w"}, large},
		{Machine{ID: "acme-flavor", Name: "openstack_compute_instance_v2.ng_w[2]", NodeGroup: "w"}, flavor}}
	for i := range added {
		a := &added[i]
		a.m.Address = tr.addr(tr.next)
		tr.next++
		if err := tr.host.BootMachine(talosnode.Machine{ID: a.m.ID, Address: a.m.Address, UserData: tr.wCfg, Hardware: &a.hw}); err != nil {
			t.Fatal(err)
		}
		tr.ms = append(tr.ms, a.m)
	}
	// A bare-metal machine waits in maintenance mode.
	metal := Machine{ID: "acme-metal", Name: "metal[0]", NodeGroup: "w", Address: tr.addr(tr.next)}
	tr.next++
	if err := tr.host.StartMaintenance(metal.Address); err != nil {
		t.Fatal(err)
	}
	tr.ms = append(tr.ms, metal)
	tr.putMachines()
	eventually(t, "the new machines' inventory in the store", func() bool {
		for _, m := range []string{"acme-large", "acme-flavor", "acme-metal"} {
			if tr.storedStatus(m).Hardware == nil {
				return false
			}
		}
		return true
	})
	checkInventory(t, "large sim worker", tr.storedStatus("acme-large"), 8, 16<<10, "vda", 160<<30)
	checkInventory(t, "OpenStack flavor", tr.storedStatus("acme-flavor"), 8, 16<<10, "vda", 100<<30)
	// Talos is not installed yet on a machine in maintenance mode: it has
	// no system disk.
	st = tr.storedStatus("acme-metal")
	if h := st.Hardware; !st.Maintenance || st.Stage != schema.StageMaintenance || h.CPUs != 8 || h.MemoryMiB != 32<<10 ||
		len(h.BlockDevices) != 2 || h.BlockDevices[0].Name != "nvme0n1" || h.BlockDevices[0].SystemDisk || !h.BlockDevices[1].Rotational {
		t.Errorf("bare metal in maintenance: maintenance %v, stage %s, hardware %+v", st.Maintenance, st.Stage, h)
	}
}

// checkInventory checks a stored machine's hardware: its CPUs, memory and
// system disk.
func checkInventory(t *testing.T, what string, st schema.MachineStatus, cpus, memMiB int, disk string, diskBytes uint64) {
	t.Helper()
	h := st.Hardware
	if h == nil {
		t.Errorf("%s: no hardware in the store", what)
		return
	}
	var sys *schema.BlockDevice
	for i, d := range h.BlockDevices {
		if d.SystemDisk {
			sys = &h.BlockDevices[i]
		}
	}
	if h.CPUs != cpus || h.MemoryMiB != memMiB || h.Arch != "amd64" || len(h.Processors) != 1 || len(h.MemoryModules) == 0 ||
		sys == nil || sys.Name != disk || sys.SizeBytes != diskBytes {
		t.Errorf("%s: hardware %+v, system disk %+v; want %d CPUs, %d MiB, system disk %s of %d bytes", what, h, sys, cpus, memMiB, disk, diskBytes)
	}
}

func (tr *tenantRig) storedLabels(id string) map[string]string {
	tr.t.Helper()
	var m schema.Machine
	if err := tr.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindMachine, id, &m) }); err != nil {
		tr.t.Fatal(err)
	}
	return m.Metadata.Labels
}

// TestWatchBringsAChangedDiskAndAddress: with the probe TTL an hour, a
// disk added to a machine and a new address of it reach the store within
// 2 s, through the watches of block.Disk and network.NodeAddress.
func TestWatchBringsAChangedDiskAndAddress(t *testing.T) {
	tr := watchRig(t, 1, 1)
	w := tr.ms[1]
	probes := tr.plane.prober.Probes()
	if err := tr.host.SetInventory(w.ID, func(inv *talosnode.Inventory) {
		inv.Disks = append(inv.Disks, talosnode.Disk{Name: "vdb", SizeBytes: 200 << 30, Model: "QEMU HARDDISK", Transport: "virtio"})
	}); err != nil {
		t.Fatal(err)
	}
	took := within(t, 2*time.Second, "the added disk in the store", func() bool {
		h := tr.storedStatus(w.ID).Hardware
		return h != nil && len(h.BlockDevices) == 2 && h.BlockDevices[1].Name == "vdb" && h.BlockDevices[1].SizeBytes == 200<<30
	})
	t.Logf("the added disk in the store after %s", took)
	extra := netip.MustParsePrefix("127.200.0.1/8")
	if err := tr.host.SetInventory(w.ID, func(inv *talosnode.Inventory) { inv.Addresses = append(inv.Addresses, extra) }); err != nil {
		t.Fatal(err)
	}
	took = within(t, 2*time.Second, "the new address in the store", func() bool {
		n := tr.storedStatus(w.ID).Network
		return n != nil && slices.Contains(n.Addresses, extra.String())
	})
	t.Logf("the new address in the store after %s", took)
	if n := tr.plane.prober.Probes() - probes; n != 0 {
		t.Fatalf("%d probes while every machine was watched, want none", n)
	}
}

// TestWatchBrokenKeepsStatusFresh: while a machine's COSI watches are
// refused (and its other calls answered), it is probed with backoff, so
// its status follows it still; once watches are let in again, its watch
// is back and probing stops.
func TestWatchBrokenKeepsStatusFresh(t *testing.T) {
	tr := watchRig(t, 1, 1)
	w := tr.ms[1]
	if err := tr.host.SetFault(w.ID, talosnode.Fault{WatchBroken: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "the watch broken", func() bool { return !tr.plane.watchedNow(w.ID) })
	if err := tr.host.SetFault(w.ID, talosnode.Fault{WatchBroken: true, Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	// The probes follow the first at once, 2 s later, then 4 s after that.
	took := within(t, 5*time.Second, "the unhealthy worker in the store, by probe", func() bool {
		st := tr.storedStatus(w.ID)
		return st.Connected && !st.Ready
	})
	t.Logf("unready in the store after %s", took)
	// Healthy again, with watches still refused: a probe on the backoff's
	// timer finds it.
	if err := tr.host.SetFault(w.ID, talosnode.Fault{WatchBroken: true}); err != nil {
		t.Fatal(err)
	}
	took = within(t, 5*time.Second, "the healthy worker in the store, by probe", func() bool { return tr.storedStatus(w.ID).Ready })
	t.Logf("ready in the store after %s", took)
	if tr.plane.watchedNow(w.ID) {
		t.Fatal("watched while watches are refused")
	}
	if err := tr.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "the watch back", func() bool { return tr.plane.watchedNow(w.ID) && tr.storedStatus(w.ID).Ready })
	probes := tr.plane.prober.Probes()
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the unhealthy worker in the store, by watch", func() bool { return !tr.storedStatus(w.ID).Ready })
	if n := tr.plane.prober.Probes() - probes; n != 0 {
		t.Fatalf("%d probes once the watch was back, want none", n)
	}
}

// TestASilentMachineShowsAsNotConnectedWithoutTheKeepalive: a control
// plane that stops answering without closing its connections (as behind
// a network that drops its packets) keeps its watches open, silent; once
// its stream connection has read nothing for StreamQuiet and does not
// answer a call in time, it is reset, the watch breaks, and the probe
// that follows shows the machine as not connected, minutes before the
// connection's keepalive would. Once it answers again, its watch is back.
func TestASilentMachineShowsAsNotConnectedWithoutTheKeepalive(t *testing.T) {
	const quiet = time.Second
	tr := watchRigWith(t, 1, 1, ObserverOptions{StreamQuiet: quiet})
	cp := tr.ms[0]
	// A quiet connection whose machine answers is left open.
	if q := tr.plane.pool.CheckQuietStreams(ctxT(t), 0, 2*time.Second); len(q) != 0 {
		t.Fatalf("connections reset while their machines answer: %v", q)
	}
	time.Sleep(2 * quiet)
	if n := tr.plane.pool.StreamConns(); n != 1 || !tr.plane.watchedNow(cp.ID) || !tr.plane.watchedNow(tr.ms[1].ID) {
		t.Fatalf("%d stream connections, control plane watched %v, worker %v; want 1 and both watched", n, tr.plane.watchedNow(cp.ID), tr.plane.watchedNow(tr.ms[1].ID))
	}
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{Silent: true}); err != nil {
		t.Fatal(err)
	}
	// quiet, a check within a third of it, the check's timeout (2 s), the
	// watch's open again at once (its dial gives up after 5 s), and the
	// probe's two attempts (2 s each): about 12 s, against the 6 minutes
	// of the keepalive.
	took := within(t, 20*time.Second, "the silent control plane not connected in the store", func() bool {
		return !tr.storedStatus(cp.ID).Connected
	})
	t.Logf("not connected in the store after %s", took)
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	within(t, 40*time.Second, "the control plane watched and connected again", func() bool {
		return tr.plane.watchedNow(cp.ID) && tr.storedStatus(cp.ID).Connected
	})
	if !tr.storedStatus(tr.ms[1].ID).Connected {
		t.Fatal("the worker, which answered throughout, shows as not connected")
	}
}

// TestSamplerGivesTheGauges: every sample interval, OnSamples gets the
// load and memory of every watched machine that answers, and the etcd DB
// size and leadership of control planes; a machine that does not answer
// has no sample.
func TestSamplerGivesTheGauges(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	tr.putMachines()
	tr.putTenant()
	if err := tr.host.SetFault(tr.ms[2].ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	batches := make(chan map[string]map[string]schema.MachineSample, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.plane.RunObserver(ctx, ObserverOptions{Watch: true, SampleInterval: 50 * time.Millisecond,
			Bundle: func(string) []byte { return tr.secrets },
			OnSamples: func(s map[string]map[string]schema.MachineSample) {
				select {
				case batches <- s:
				default:
				}
			}})
	}()
	defer func() { cancel(); <-done }()
	var got map[string]schema.MachineSample
	eventually(t, "samples of both answering machines", func() bool {
		select {
		case b := <-batches:
			got = b["acme"]
		default:
		}
		return len(got) == 2
	})
	cp, w := got[tr.ms[0].ID], got[tr.ms[1].ID]
	if _, ok := got[tr.ms[2].ID]; ok {
		t.Errorf("a sample of the machine that does not answer: %+v", got)
	}
	for name, s := range map[string]schema.MachineSample{"control plane": cp, "worker": w} {
		// MemTotal is the machine's 4 GiB less what the kernel keeps.
		if s.At.IsZero() || s.MemoryTotalBytes > 4<<30 || s.MemoryTotalBytes < 3<<30 || s.MemoryUsedBytes == 0 || s.MemoryUsedBytes >= s.MemoryTotalBytes || s.Load1 < 0 {
			t.Errorf("%s: sample %+v", name, s)
		}
	}
	if cp.EtcdDBSizeBytes <= 0 || !cp.EtcdLeader {
		t.Errorf("control plane's etcd: %+v, want its DB size and leadership", cp)
	}
	if w.EtcdDBSizeBytes != 0 || w.EtcdLeader {
		t.Errorf("worker's etcd facts: %+v", w)
	}
}

// TestSamplerGivesTheGaugesOfMachinesOnEventsStreams: with one machine
// watched, the first control plane, the tenant's other control plane and
// its workers follow by its events stream; the sampler asks them for
// their gauges through it, in one call of each that it fans out, and
// gives those of each that answers: the second control plane's etcd facts
// too, and none for the worker that refuses.
func TestSamplerGivesTheGaugesOfMachinesOnEventsStreams(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 2, 2)
	got := tr.sampledWith(t, tr.ms[3], ObserverOptions{Interval: time.Hour, Watch: true, MaxWatched: 1})
	if !r.plane.onEventsNow(tr.ms[1].ID) || !r.plane.onEventsNow(tr.ms[2].ID) {
		t.Fatal("the second control plane and the answering worker are not on the events stream")
	}
	if got[tr.ms[0].ID].EtcdLeader == got[tr.ms[1].ID].EtcdLeader {
		t.Errorf("etcd leadership: %v and %v, want one leader of the two control planes", got[tr.ms[0].ID].EtcdLeader, got[tr.ms[1].ID].EtcdLeader)
	}
}

// TestSamplerGivesTheGaugesOfPolledMachines: an observer that does not
// watch probes every machine on the TTL, and follows none; the sampler
// asks each machine that answers for its gauges all the same, and gives
// none for the worker that refuses.
func TestSamplerGivesTheGaugesOfPolledMachines(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	tr.sampledWith(t, tr.ms[2], ObserverOptions{Interval: 50 * time.Millisecond})
	if n := r.plane.Watched(); n != 0 {
		t.Fatalf("%d machines watched by an observer that does not watch", n)
	}
}

// sampledWith stores the tenant's machines, of which refusing refuses,
// observes them with oo and a sample every 50 ms, and returns the first
// batch with a sample of every other machine, once it has checked them:
// each with its memory, control planes with their etcd DB size, and none
// for refusing.
func (tr *tenantRig) sampledWith(t *testing.T, refusing Machine, oo ObserverOptions) map[string]schema.MachineSample {
	t.Helper()
	tr.putMachines()
	tr.putTenant()
	if err := tr.host.SetFault(refusing.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	batches := make(chan map[string]schema.MachineSample, 16)
	oo.SampleInterval = 50 * time.Millisecond
	oo.Bundle = func(string) []byte { return tr.secrets }
	oo.OnSamples = func(s map[string]map[string]schema.MachineSample) {
		select {
		case batches <- s[tr.tenant]:
		default:
		}
	}
	tr.observeWith(t, time.Hour, oo)
	answering := len(tr.ms) - 1
	var got map[string]schema.MachineSample
	eventually(t, "samples of the answering machines", func() bool {
		select {
		case got = <-batches:
		default:
		}
		return len(got) == answering
	})
	if _, ok := got[refusing.ID]; ok {
		t.Errorf("a sample of the machine that refuses: %+v", got)
	}
	for i, m := range tr.ms {
		if m.ID == refusing.ID {
			continue
		}
		s, ok := got[m.ID]
		if !ok || s.At.IsZero() || s.MemoryTotalBytes == 0 || s.MemoryUsedBytes == 0 || s.MemoryUsedBytes >= s.MemoryTotalBytes {
			t.Errorf("machine %d (%s): sample %+v", i, m.ID, s)
		}
		if m.ControlPlane != (s.EtcdDBSizeBytes > 0) {
			t.Errorf("machine %d (%s, control plane %v): etcd DB size %d", i, m.ID, m.ControlPlane, s.EtcdDBSizeBytes)
		}
	}
	return got
}

// TestWatchCountAcrossReplacement: a machine whose watch is replaced (its
// address or bundle changed) briefly has two, which end in either order;
// the count of watched machines holds the machine while either is open,
// counts each end once, and a machine that Forget dropped while watched
// is counted out once.
func TestWatchCountAcrossReplacement(t *testing.T) {
	p := NewProber(nil, ProberOptions{})
	old := p.watchOpen("m")
	replacement := p.watchOpen("m")
	old() // the replaced watch ends after its replacement opened
	if n := p.Watching(); n != 1 {
		t.Fatalf("after the replaced watch ended: %d watched, want 1", n)
	}
	old()
	replacement()
	replacement()
	if n := p.Watching(); n != 0 {
		t.Fatalf("after both ended: %d watched, want 0", n)
	}
	gone := p.watchOpen("m")
	p.Forget("m")
	gone()
	if n := p.Watching(); n != 0 {
		t.Fatalf("a machine forgotten while watched: %d watched, want 0", n)
	}
}

// through is the address whose connection the machine's watch uses while
// it is open, "" when it is not.
func (pl *Plane) through(id string) string {
	pl.watches.mu.Lock()
	defer pl.watches.mu.Unlock()
	if w := pl.watches.byID[id]; w != nil {
		return w.through
	}
	return ""
}

// TestWorkersWatchedThroughAControlPlane: the watches of a tenant's
// workers go through its control plane's stream connection, which
// forwards them ("node" header), so that the tenant's watches keep one
// connection; a
// worker's change reaches the store through it at once. When the control
// plane stops answering, the workers' watches open directly and still
// bring changes; once it answers again, they move back to it.
func TestWorkersWatchedThroughAControlPlane(t *testing.T) {
	tr := watchRigWith(t, 1, 3, ObserverOptions{RegateInterval: 300 * time.Millisecond})
	cp, workers := tr.ms[0], tr.ms[1:]
	throughCP := func() bool {
		for _, w := range workers {
			if tr.plane.through(w.ID) != cp.Address {
				return false
			}
		}
		return tr.plane.through(cp.ID) == cp.Address
	}
	within(t, 5*time.Second, "every worker watched through the control plane", throughCP)
	if n := tr.pool.StreamConns(); n != 1 {
		t.Fatalf("%d connections in use for a tenant of 4 machines watched, want the control plane's alone", n)
	}
	probes := tr.plane.prober.Probes()
	w := workers[1]
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the unhealthy worker in the store, through the control plane", func() bool { return !tr.storedStatus(w.ID).Ready })
	if n := tr.plane.prober.Probes() - probes; n != 0 {
		t.Fatalf("%d probes while every machine was watched, want none", n)
	}

	// The control plane refuses: its connection closes, and the workers'
	// watches open directly.
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "every worker watched directly", func() bool {
		for _, w := range workers {
			if tr.plane.through(w.ID) != w.Address {
				return false
			}
		}
		return true
	})
	if err := tr.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the healthy worker in the store, by its direct watch", func() bool { return tr.storedStatus(w.ID).Ready })

	if err := tr.host.SetFault(cp.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	// The control plane's watch is back within its backoff (2 s, then
	// 4 s), and the workers' within a regate interval after it.
	within(t, 10*time.Second, "every worker watched through the control plane again", throughCP)
	within(t, 10*time.Second, "the workers' direct connections released", func() bool { return tr.pool.StreamConns() == 1 })
}

// TestControlPlanesWatchedThroughTheFirst: a tenant's other control
// planes are watched through its first, as its workers are, and the first
// stays direct, so that the tenant holds one connection; their etcd
// membership and their changes come through it. When the first refuses,
// the others open directly (the workers go through one of them), and once
// it answers again they move back to it.
func TestControlPlanesWatchedThroughTheFirst(t *testing.T) {
	tr := watchRigWith(t, 3, 2, ObserverOptions{RegateInterval: 300 * time.Millisecond})
	first, others := tr.ms[0], tr.ms[1:3]
	throughFirst := func() bool {
		for _, m := range tr.ms {
			if tr.plane.through(m.ID) != first.Address {
				return false
			}
		}
		return true
	}
	within(t, 5*time.Second, "every machine watched through the first control plane", throughFirst)
	if n := tr.pool.StreamConns(); n != 1 {
		t.Fatalf("%d connections in use for a tenant of 5 machines watched, want the first control plane's alone", n)
	}
	cp := others[0]
	within(t, 2*time.Second, "the etcd membership of a control plane watched through the first", func() bool {
		e := tr.storedStatus(cp.ID).Etcd
		return e != nil && len(e.Members) == 3
	})
	probes := tr.plane.prober.Probes()
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the unhealthy control plane in the store, through the first", func() bool { return !tr.storedStatus(cp.ID).Ready })
	if n := tr.plane.prober.Probes() - probes; n != 0 {
		t.Fatalf("%d probes while every machine was watched, want none", n)
	}

	if err := tr.host.SetFault(first.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "the other control planes watched directly", func() bool {
		for _, m := range others {
			if tr.plane.through(m.ID) != m.Address {
				return false
			}
		}
		return true
	})
	if err := tr.host.SetFault(cp.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the healthy control plane in the store, by its direct watch", func() bool { return tr.storedStatus(cp.ID).Ready })

	if err := tr.host.SetFault(first.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "the other control planes watched through the first again", func() bool {
		for _, m := range others {
			if tr.plane.through(m.ID) != first.Address {
				return false
			}
		}
		return tr.plane.through(first.ID) == first.Address
	})
}

// TestMachinesBeyondTheBoundProbedOnTime: with the observer's default
// interval and a machine beyond the watch bound and off the events
// streams (the control plane that would carry its stream refuses), the
// observer passes every probePass rather than every
// DefaultKubernetesInterval, so that the probed machine's change reaches
// the store within its probe TTL and a pass, three times in a row.
func TestMachinesBeyondTheBoundProbedOnTime(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	tr.putMachines()
	tr.putTenant()
	w := tr.ms[1]
	if err := tr.host.SetFault(tr.ms[0].ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	opts := r.opts
	opts.Prober = NewProber(r.opts.Pool, ProberOptions{TTL: 300 * time.Millisecond, Timeout: 2 * time.Second})
	r.plane = r.newPlane(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.plane.RunObserver(ctx, ObserverOptions{Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	within(t, 5*time.Second, "the worker probed and written ready", func() bool { return tr.storedStatus(w.ID).Ready })
	if r.plane.watchedNow(w.ID) || r.plane.onEventsNow(w.ID) {
		t.Fatal("the worker is watched beyond the bound of 1, or on an events stream through the refusing control plane")
	}
	limit := probePass + 1500*time.Millisecond // the TTL, a pass, the probe and its write
	for i, fault := range []talosnode.Fault{{Unhealthy: "kubelet"}, {}, {Unhealthy: "kubelet"}} {
		if err := tr.host.SetFault(w.ID, fault); err != nil {
			t.Fatal(err)
		}
		want := fault.Unhealthy == ""
		within(t, limit, fmt.Sprintf("change %d of the probed worker in the store", i+1), func() bool { return tr.storedStatus(w.ID).Ready == want })
	}
}

// TestProbesGoThroughAWatchedControlPlane: with one machine watched (the
// tenant's control plane, first in the order), the workers beyond the
// bound are probed through it, which forwards the probes, so the pool
// dials none of them, and a worker's change reaches
// the store by probe. While the control plane refuses, the workers are
// probed directly.
func TestProbesGoThroughAWatchedControlPlane(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 3)
	tr.putMachines()
	tr.putTenant()
	cp, workers := tr.ms[0], tr.ms[1:]
	// Connections left idle close within 300 ms: those of the first
	// pass, whose probes went direct before the watch was open, go soon.
	pool := NewPool(PoolOptions{IdleTimeout: 300 * time.Millisecond})
	t.Cleanup(pool.Close)
	opts := r.opts
	opts.Pool = pool
	opts.Prober = NewProber(pool, ProberOptions{TTL: 100 * time.Millisecond, Timeout: 2 * time.Second})
	r.plane = r.newPlane(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.plane.RunObserver(ctx, ObserverOptions{Interval: 50 * time.Millisecond, Watch: true, MaxWatched: 1, Bundle: func(string) []byte { return tr.secrets }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	within(t, 5*time.Second, "the control plane watched, and every worker probed and written ready", func() bool {
		for _, w := range workers {
			if st := tr.storedStatus(w.ID); !st.Connected || !st.Ready {
				return false
			}
		}
		return r.plane.through(cp.ID) == cp.Address
	})
	for _, w := range workers {
		if r.plane.watchedNow(w.ID) {
			t.Fatalf("worker %s is watched beyond the bound of 1", w.ID)
		}
	}
	cpAlone := func() bool {
		addrs := pool.openAddresses()
		return len(addrs) <= 1 && (len(addrs) == 0 || addrs[0] == cp.Address)
	}
	within(t, 2*time.Second, "the first pass's direct connections closed", cpAlone)
	w := workers[0]
	if err := tr.host.SetFault(w.ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "the unhealthy worker in the store, by a probe through the control plane", func() bool { return !tr.storedStatus(w.ID).Ready })
	if !cpAlone() {
		t.Fatalf("the pool holds clients of %v, want the control plane's alone: the probes dialed the workers", pool.openAddresses())
	}

	if err := tr.host.SetFault(cp.ID, talosnode.Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	if err := tr.host.SetFault(w.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, "the healthy worker in the store, by a direct probe", func() bool { return tr.storedStatus(w.ID).Ready })
	within(t, 2*time.Second, "the workers' own connections, while the control plane refuses", func() bool { return pool.Open() >= 2 })
}

// TestAnsweredAs: a watch opened through a gateway stands only when the
// machine that answered has the watched machine's address: not when the
// gateway answered for itself, nor when the answer has no addresses.
func TestAnsweredAs(t *testing.T) {
	m := Machine{ID: "w", Address: "127.1.0.5"}
	for _, c := range []struct {
		addrs []string
		want  bool
	}{
		{[]string{"127.1.0.5/8", "127.99.0.1/8"}, true},
		{[]string{"127.1.0.2/8"}, false}, // the gateway's own
		{nil, false},
	} {
		o := Observation{Network: &schema.MachineNetwork{Addresses: c.addrs}}
		if got := answeredAs(o, m); got != c.want {
			t.Errorf("addresses %v: answeredAs %v, want %v", c.addrs, got, c.want)
		}
	}
	if answeredAs(Observation{}, m) {
		t.Error("an observation without the network answered as the machine")
	}
}
