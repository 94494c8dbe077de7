package talos

import (
	"cmp"
	"context"
	"maps"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rezuscloud/rezuscloud/schema"
)

// DefaultSampleInterval is how often the observer samples the gauges of
// the connected machines unless ObserverOptions.SampleInterval says
// otherwise.
const DefaultSampleInterval = time.Minute

// startSampler samples the gauges of the connected machines every
// opts.SampleInterval and hands each batch to opts.OnSamples, until ctx
// ends or the returned function is called (which waits for it).
func (pl *Plane) startSampler(ctx context.Context, opts ObserverOptions) (stop func()) {
	interval := opts.SampleInterval
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	return every(ctx, interval, func(ctx context.Context) {
		if batch := pl.Sample(ctx); len(batch) > 0 && ctx.Err() == nil {
			opts.OnSamples(batch)
		}
	})
}

// every calls f every d, on a goroutine of its own, until ctx ends or the
// returned function is called, which returns once f no longer runs.
func every(ctx context.Context, d time.Duration, f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// sampleTarget is a machine to sample on its own: a watched one, or one
// that the observer probes on the TTL.
type sampleTarget struct {
	tenant string
	bundle []byte
	m      Machine
	// through is the address whose connection the machine's watch uses,
	// or its own.
	through string
}

// streamTarget is the connected machines on a tenant's events stream,
// sampled together through the stream's gateway.
type streamTarget struct {
	tenant string
	bundle []byte
	gw     gateway
	ms     []Machine
}

// Sample asks every connected machine that follows by a watch or an
// events stream for its gauges now: LoadAvg, Memory, and on control
// planes EtcdStatus, with the prober's concurrency and timeout, and
// returns them by tenant and machine. A watched machine is asked through
// its watch's address; the machines on a tenant's events stream are asked
// together, one call of each gauge over the stream's connection that
// their gateway fans out. A machine that neither follows (the observer
// does not watch, or its tenant's control planes do not answer) is asked
// at its own address, as its probes are. A machine that does not answer,
// or whose watch is broken, has no sample.
func (pl *Plane) Sample(ctx context.Context) map[string]map[string]schema.MachineSample {
	watched, streams := pl.watches.connected(pl.prober)
	watched = append(watched, pl.polledConnected()...)
	out := map[string]map[string]schema.MachineSample{}
	var mu sync.Mutex
	keep := func(tenant string, got map[string]schema.MachineSample) {
		mu.Lock()
		defer mu.Unlock()
		if out[tenant] == nil {
			out[tenant] = map[string]schema.MachineSample{}
		}
		maps.Copy(out[tenant], got)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, pl.prober.opts.Concurrency)
	run := func(f func()) bool {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f()
		}()
		return true
	}
	for _, t := range watched {
		if !run(func() {
			if s, ok := pl.sample(ctx, t); ok {
				keep(t.tenant, map[string]schema.MachineSample{t.m.ID: s})
			}
		}) {
			break
		}
	}
	for _, t := range streams {
		if !run(func() { keep(t.tenant, pl.sampleStream(ctx, t)) }) {
			break
		}
	}
	wg.Wait()
	return out
}

// sample asks one machine for its gauges; ok is false when LoadAvg or
// Memory failed. A control plane whose etcd does not answer has no etcd
// facts.
func (pl *Plane) sample(ctx context.Context, t sampleTarget) (schema.MachineSample, bool) {
	ctx, cancel := context.WithTimeout(ctx, pl.prober.opts.Timeout)
	defer cancel()
	c, release, err := pl.pool.Client(t.tenant, t.bundle, t.through)
	if err != nil {
		return schema.MachineSample{}, false
	}
	defer release()
	ctx = throughNode(ctx, t.m, t.through)
	load, err := c.MachineClient.LoadAvg(ctx, &emptypb.Empty{})
	if err != nil || len(load.GetMessages()) == 0 {
		return schema.MachineSample{}, false
	}
	mem, err := c.Memory(ctx)
	if err != nil || len(mem.GetMessages()) == 0 {
		return schema.MachineSample{}, false
	}
	var etcd *machine.EtcdStatus
	if t.m.ControlPlane {
		if st, err := c.EtcdStatus(ctx); err == nil && len(st.GetMessages()) > 0 {
			etcd = st.GetMessages()[0]
		}
	}
	return gauges(pl.opts.Now(), load.GetMessages()[0], mem.GetMessages()[0], etcd), true
}

// sampleStream asks the machines of t for their gauges through t's
// gateway, and returns those that answered LoadAvg and Memory by ID.
func (pl *Plane) sampleStream(ctx context.Context, t streamTarget) map[string]schema.MachineSample {
	ctx, cancel := context.WithTimeout(ctx, pl.prober.opts.Timeout)
	defer cancel()
	sc, release, err := pl.pool.Streams(t.tenant, t.bundle, t.gw.address)
	if err != nil {
		return nil
	}
	defer release()
	var all, cps []string
	for _, m := range t.ms {
		all = append(all, m.Address)
		if m.ControlPlane {
			cps = append(cps, m.Address)
		}
	}
	load, err := fanOutCall[machine.LoadAvgResponse](ctx, sc, machine.MachineService_LoadAvg_FullMethodName, all)
	if err != nil {
		return nil
	}
	mem, err := fanOutCall[machine.MemoryResponse](ctx, sc, machine.MachineService_Memory_FullMethodName, all)
	if err != nil {
		return nil
	}
	var etcd *machine.EtcdStatusResponse
	if len(cps) > 0 {
		etcd, _ = fanOutCall[machine.EtcdStatusResponse](ctx, sc, machine.MachineService_EtcdStatus_FullMethodName, cps)
	}
	loads, mems, etcds := answered(load.GetMessages()), answered(mem.GetMessages()), answered(etcd.GetMessages())
	now := pl.opts.Now()
	out := map[string]schema.MachineSample{}
	for _, m := range t.ms {
		if l, mm := loads[m.Address], mems[m.Address]; l != nil && mm != nil {
			out[m.ID] = gauges(now, l, mm, etcds[m.Address])
		}
	}
	return out
}

// answered returns the messages of a fanned-out answer that carry no
// error, by the node name in their metadata.
func answered[M interface{ GetMetadata() *common.Metadata }](msgs []M) map[string]M {
	out := make(map[string]M, len(msgs))
	for _, m := range msgs {
		if md := m.GetMetadata(); md.GetError() == "" {
			out[md.GetHostname()] = m
		}
	}
	return out
}

// gauges is the sample at of a machine's LoadAvg and Memory, and of its
// EtcdStatus when it has one (a control plane whose etcd answers).
func gauges(at time.Time, load *machine.LoadAvg, mem *machine.Memory, etcd *machine.EtcdStatus) schema.MachineSample {
	s := schema.MachineSample{At: at, Load1: load.GetLoad1()}
	mi := mem.GetMeminfo()
	// Meminfo is in KiB, as /proc/meminfo has it.
	s.MemoryTotalBytes = mi.GetMemtotal() << 10
	s.MemoryUsedBytes = (mi.GetMemtotal() - min(mi.GetMemavailable(), mi.GetMemtotal())) << 10
	if etcd != nil {
		ms := etcd.GetMemberStatus()
		s.EtcdDBSizeBytes = ms.GetDbSize()
		s.EtcdLeader = ms.GetMemberId() != 0 && ms.GetLeader() == ms.GetMemberId()
	}
	return s
}

// connected returns the watched machines whose standing observation is
// connected and not in maintenance mode, and, by tenant, those of the
// events streams that are on their stream and connected.
func (ws *watchSet) connected(p *Prober) ([]sampleTarget, []streamTarget) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var watched []sampleTarget
	for id, w := range ws.byID {
		if o, ok := p.Last(id); ok && o.Connected && !o.Maintenance {
			watched = append(watched, sampleTarget{tenant: w.tenant, bundle: w.bundle, m: w.m, through: cmp.Or(w.through, w.m.Address)})
		}
	}
	var streams []streamTarget
	for tenant, ev := range ws.events {
		t := streamTarget{tenant: tenant, bundle: ev.bundle, gw: ev.gw}
		for _, m := range ev.ms {
			if o, ok := p.Last(m.ID); ok && o.Connected && !o.Maintenance && p.onStream(m.ID) {
				t.ms = append(t.ms, m)
			}
		}
		if len(t.ms) > 0 {
			streams = append(streams, t)
		}
	}
	return watched, streams
}

// unfollowed returns the machines of byTenant, whose tenants' bundles
// the pass found in bundles, that neither a watch nor an events stream
// follows now.
func (pl *Plane) unfollowed(byTenant map[string][]Machine, bundles map[string][]byte) *[]sampleTarget {
	var out []sampleTarget
	for tenant, ms := range byTenant {
		b := bundles[tenant]
		if b == nil {
			continue // not probed either
		}
		for _, m := range ms {
			if !pl.prober.followed(m.ID) {
				out = append(out, sampleTarget{tenant: tenant, bundle: b, m: m})
			}
		}
	}
	return &out
}

// polledConnected returns the machines that the last pass found
// unfollowed and that still are, connected and out of maintenance, each
// to be asked as its timed probe is: through its tenant's gateway when
// there is one, else at its own address.
func (pl *Plane) polledConnected() []sampleTarget {
	polled := pl.polled.Load()
	if polled == nil {
		return nil
	}
	var out []sampleTarget
	for _, t := range *polled {
		if o, ok := pl.prober.Last(t.m.ID); ok && o.Connected && !o.Maintenance && !pl.prober.followed(t.m.ID) {
			t.through = cmp.Or(pl.prober.gatewayOf(t.tenant, t.m, true), t.m.Address)
			out = append(out, t)
		}
	}
	return out
}
