package talos

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// ProberOptions configure a Prober. Zero fields take the defaults.
type ProberOptions struct {
	// TTL is how long an observation stands: a machine is probed at most
	// once per TTL, however many callers ask. Default 15 s.
	TTL time.Duration
	// Concurrency is how many probes run at once. Default 32.
	Concurrency int
	// Timeout bounds one probe: a machine that does not answer within it
	// is observed as not connected. Default 3 s.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Prober observes machines through a Pool, at most once per machine per
// TTL, with a bounded number of probes at a time, so that a machine that
// does not answer costs one probe slot for Timeout and slows no other.
type Prober struct {
	pool *Pool
	opts ProberOptions
	sem  chan struct{}

	mu      sync.Mutex
	entries map[string]*probeEntry // by machine id

	probes atomic.Int64
}

// probeEntry is the last observation of a machine, and the probe in
// flight, if any.
type probeEntry struct {
	obs      Observation
	have     bool
	answered time.Time     // when the machine last answered a probe
	inFlight chan struct{} // closed when the probe in flight is done
}

// NewProber returns a prober that dials through pool.
func NewProber(pool *Pool, opts ProberOptions) *Prober {
	if opts.TTL <= 0 {
		opts.TTL = 15 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 32
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Prober{pool: pool, opts: opts, sem: make(chan struct{}, opts.Concurrency), entries: map[string]*probeEntry{}}
}

// TTL returns how long an observation stands.
func (p *Prober) TTL() time.Duration { return p.opts.TTL }

// Probes counts the probes made so far.
func (p *Prober) Probes() int64 { return p.probes.Load() }

// Observe returns an observation of each machine of a tenant, in the
// order given: the standing one when it is younger than the TTL, else a
// new probe's. Probes of the machines run in parallel, bounded by the
// prober's concurrency; a caller that asks for a machine whose probe is in
// flight waits for that probe instead of starting another.
func (p *Prober) Observe(ctx context.Context, tenant string, bundle []byte, ms []Machine) []Observation {
	out := make([]Observation, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = p.observe(ctx, tenant, bundle, m, false)
		}()
	}
	wg.Wait()
	return out
}

// Fresh probes one machine now, whatever the age of its observation, and
// keeps the result as its standing observation. Rollouts use it.
func (p *Prober) Fresh(ctx context.Context, tenant string, bundle []byte, m Machine) Observation {
	return p.observe(ctx, tenant, bundle, m, true)
}

func (p *Prober) observe(ctx context.Context, tenant string, bundle []byte, m Machine, fresh bool) Observation {
	for {
		p.mu.Lock()
		e := p.entries[m.ID]
		if e == nil {
			e = &probeEntry{}
			p.entries[m.ID] = e
		}
		if !fresh && e.have && p.opts.Now().Sub(e.obs.At) < p.opts.TTL {
			obs := e.obs
			p.mu.Unlock()
			return obs
		}
		if wait := e.inFlight; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				fresh = false // that probe is as fresh as any
				continue
			case <-ctx.Done():
				return Observation{Machine: m.ID, At: p.opts.Now(), Error: ctx.Err().Error()}
			}
		}
		done := make(chan struct{})
		e.inFlight = done
		p.mu.Unlock()

		obs := p.probe(ctx, tenant, bundle, m)
		p.mu.Lock()
		if obs.Connected {
			e.answered = obs.At
		}
		obs.LastAnswered = e.answered
		if ctx.Err() == nil {
			e.obs, e.have = obs, true
		}
		e.inFlight = nil
		close(done)
		p.mu.Unlock()
		return obs
	}
}

// probe makes one probe, within the concurrency bound and the timeout.
func (p *Prober) probe(ctx context.Context, tenant string, bundle []byte, m Machine) Observation {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return Observation{Machine: m.ID, At: p.opts.Now(), Error: ctx.Err().Error()}
	}
	defer func() { <-p.sem }()
	p.probes.Add(1)
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	c, release, err := p.pool.Client(tenant, bundle, m.Address)
	if err != nil {
		return Observation{Machine: m.ID, At: p.opts.Now(), Error: err.Error()}
	}
	defer release()
	obs := observe(ctx, c, m, p.opts.Now())
	if !obs.Connected && ctx.Err() == nil {
		p.pool.Drop(tenant, bundle, m.Address)
		obs = p.pool.withMaintenance(ctx, obs, m.Address)
	}
	return obs
}

// Last returns the standing observation of a machine, however old, and
// whether there is one.
func (p *Prober) Last(id string) (Observation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[id]
	if e == nil || !e.have {
		return Observation{}, false
	}
	return e.obs, true
}

// Forget drops the observations of machines that are gone.
func (p *Prober) Forget(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if e := p.entries[id]; e != nil && e.inFlight == nil {
			delete(p.entries, id)
		}
	}
}
