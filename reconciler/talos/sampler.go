package talos

import (
	"cmp"
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rezuscloud/rezuscloud/schema"
)

// DefaultSampleInterval is how often the observer samples the gauges of
// the watched machines unless ObserverOptions.SampleInterval says
// otherwise.
const DefaultSampleInterval = time.Minute

// startSampler samples the gauges of the watched machines every
// opts.SampleInterval and hands each batch to opts.OnSamples, until ctx
// ends or the returned function is called (which waits for it).
func (pl *Plane) startSampler(ctx context.Context, opts ObserverOptions) (stop func()) {
	every := opts.SampleInterval
	if every <= 0 {
		every = DefaultSampleInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if batch := pl.Sample(ctx); len(batch) > 0 && ctx.Err() == nil {
				opts.OnSamples(batch)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// sampleTarget is a watched machine to sample.
type sampleTarget struct {
	tenant string
	bundle []byte
	m      Machine
	// through is the address whose connection the machine's watch uses.
	through string
}

// Sample asks every watched machine that answers for its gauges now:
// LoadAvg, Memory, and on control planes EtcdStatus, with the prober's
// concurrency and timeout, and returns them by tenant and machine. A
// machine that does not answer, or whose watch is broken, has no sample.
func (pl *Plane) Sample(ctx context.Context) map[string]map[string]schema.MachineSample {
	targets := pl.watches.connected(pl.prober)
	out := map[string]map[string]schema.MachineSample{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, pl.prober.opts.Concurrency)
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return out
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s, ok := pl.sample(ctx, t)
			if !ok {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if out[t.tenant] == nil {
				out[t.tenant] = map[string]schema.MachineSample{}
			}
			out[t.tenant][t.m.ID] = s
		}()
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
	s := schema.MachineSample{At: pl.opts.Now()}
	load, err := c.MachineClient.LoadAvg(ctx, &emptypb.Empty{})
	if err != nil || len(load.GetMessages()) == 0 {
		return s, false
	}
	s.Load1 = load.GetMessages()[0].GetLoad1()
	mem, err := c.Memory(ctx)
	if err != nil || len(mem.GetMessages()) == 0 {
		return s, false
	}
	mi := mem.GetMessages()[0].GetMeminfo()
	// Meminfo is in KiB, as /proc/meminfo has it.
	s.MemoryTotalBytes = mi.GetMemtotal() << 10
	s.MemoryUsedBytes = (mi.GetMemtotal() - min(mi.GetMemavailable(), mi.GetMemtotal())) << 10
	if t.m.ControlPlane {
		st, err := c.EtcdStatus(ctx)
		if err != nil || len(st.GetMessages()) == 0 {
			return s, true // etcd does not run (yet): the machine's gauges stand
		}
		ms := st.GetMessages()[0].GetMemberStatus()
		s.EtcdDBSizeBytes = ms.GetDbSize()
		s.EtcdLeader = ms.GetMemberId() != 0 && ms.GetLeader() == ms.GetMemberId()
	}
	return s, true
}

// connected returns the watched machines whose standing observation is
// connected and not in maintenance mode.
func (ws *watchSet) connected(p *Prober) []sampleTarget {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []sampleTarget
	for id, w := range ws.byID {
		if o, ok := p.Last(id); ok && o.Connected && !o.Maintenance {
			out = append(out, sampleTarget{tenant: w.tenant, bundle: w.bundle, m: w.m, through: cmp.Or(w.through, w.m.Address)})
		}
	}
	return out
}
