package talos

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// ProberOptions configure a Prober. Zero fields take the defaults.
type ProberOptions struct {
	// TTL is how long an observation stands: a machine is probed at most
	// once per TTL, however many callers ask. Default 15 s.
	TTL time.Duration
	// Concurrency is how many probes run at once at most. Default 32.
	// Fewer run while probes come late but answer when asked again
	// (probeSlots).
	Concurrency int
	// Timeout bounds one attempt of a probe: a machine that does not
	// answer within it is asked once more, and observed as not connected
	// when it does not answer then either. Default 3 s.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log tells when fewer probes run at once, and when as many as
	// Concurrency run again; nil logs nothing.
	Log *slog.Logger
}

// Prober observes machines through a Pool, at most once per machine per
// TTL, with a bounded number of probes at a time, so that a machine that
// does not answer costs one probe slot for twice Timeout at most and slows
// no other.
type Prober struct {
	pool  *Pool
	opts  ProberOptions
	slots *probeSlots

	mu       sync.Mutex
	entries  map[string]*probeEntry // by machine id
	watching int                    // entries with an open watch

	probes atomic.Int64
	// gateway, when set, names a control plane of the tenant that
	// answers (its watch or the tenant's events stream is open through
	// it), through which a timed probe of another machine goes (its apid
	// forwards it) instead of dialing the machine: "" when there is none.
	gateway atomic.Pointer[func(tenant string, m Machine) string]
}

// probeEntry is the last observation of a machine, and the probe in
// flight, if any.
type probeEntry struct {
	obs      Observation
	have     bool
	answered time.Time     // when the machine last answered a probe
	inFlight chan struct{} // closed when the probe in flight is done
	// watches count the watches that follow the machine (watch.go) and
	// keep obs current, so that obs stands whatever its age.
	watches int
	// events count the events streams the machine is on (events.go),
	// which tell its changes of status and addresses, so that obs stands
	// for eventsStand.
	events int
	// watched counts the observations watches kept (keep), so that a
	// probe overtaken by a watch's newer read does not stand over it.
	watched uint64
}

// eventsStand is how long the observation of a machine on an events
// stream stands, when the probe TTL is shorter: its events bring its
// status, addresses and going down, so its timed probe only catches what
// they do not tell (the config's hash, the disks, the etcd members).
const eventsStand = 5 * time.Minute

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
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Prober{pool: pool, opts: opts, slots: newProbeSlots(opts.Concurrency), entries: map[string]*probeEntry{}}
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
//
// Control planes never observed before go first, so that the first probes
// of the others can go through one of them (gatewayOf) rather than each
// dial its machine.
func (p *Prober) Observe(ctx context.Context, tenant string, bundle []byte, ms []Machine) []Observation {
	out := make([]Observation, len(ms))
	first := make([]bool, len(ms))
	for i, m := range ms {
		_, seen := p.Last(m.ID)
		first[i] = m.ControlPlane && !seen
	}
	for _, phase := range []bool{true, false} {
		var wg sync.WaitGroup
		for i, m := range ms {
			if first[i] != phase {
				continue
			}
			wg.Go(func() { out[i] = p.observe(ctx, tenant, bundle, m, probeMode{viaGateway: true}) })
		}
		wg.Wait()
	}
	return out
}

// Fresh probes one machine now, whatever the age of its observation, and
// keeps the result as its standing observation. Rollouts use it.
func (p *Prober) Fresh(ctx context.Context, tenant string, bundle []byte, m Machine) Observation {
	return p.observe(ctx, tenant, bundle, m, probeMode{fresh: true})
}

// StandIn probes one machine now in place of its broken watch: as Fresh,
// and it reads the inventory again, which the watch would have reported
// had it changed.
func (p *Prober) StandIn(ctx context.Context, tenant string, bundle []byte, m Machine) Observation {
	return p.observe(ctx, tenant, bundle, m, probeMode{fresh: true, inventory: allInventory})
}

// Prompt probes one machine now because an event said it changed, through
// its tenant's gateway as a timed probe goes, reading inventory again
// besides what a probe reads. A probe in flight when it is asked may have
// read the machine before the change, so it probes again after that one.
func (p *Prober) Prompt(ctx context.Context, tenant string, bundle []byte, m Machine, inventory inventoryPart) Observation {
	return p.observe(ctx, tenant, bundle, m, probeMode{fresh: true, inventory: inventory, viaGateway: true, again: true})
}

// probeMode is how observe goes about a machine.
type probeMode struct {
	fresh      bool          // probe whatever the standing observation's age
	inventory  inventoryPart // inventory read besides what a probe reads
	viaGateway bool          // through the tenant's gateway, as a timed probe
	again      bool          // probe again after a probe in flight when asked
}

// observe returns m's standing observation, or, when it is older than the
// TTL or mode says fresh, a new probe's.
func (p *Prober) observe(ctx context.Context, tenant string, bundle []byte, m Machine, mode probeMode) Observation {
	for {
		p.mu.Lock()
		e := p.entryLocked(m.ID)
		if !mode.fresh && e.have && p.stands(e) {
			obs := e.obs
			p.mu.Unlock()
			return obs
		}
		if wait := e.inFlight; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				// That probe is as fresh as any, unless asked again.
				mode.fresh, mode.again = mode.again, false
				continue
			case <-ctx.Done():
				return Observation{Machine: m.ID, At: p.opts.Now(), Error: ctx.Err().Error()}
			}
		}
		done := make(chan struct{})
		e.inFlight = done
		prev, have, watched := e.obs, e.have, e.watched
		p.mu.Unlock()

		obs := p.probe(ctx, tenant, bundle, m, prev, have, mode.inventory, mode.viaGateway)
		p.mu.Lock()
		if e.watched != watched && e.obs.At.After(obs.At) {
			// A watch kept what it read after the probe began: the probe's
			// older read does not stand over it.
			obs = e.obs
		} else {
			obs = p.keepLocked(e, obs, ctx.Err() == nil)
		}
		e.inFlight = nil
		close(done)
		p.mu.Unlock()
		return obs
	}
}

// entryLocked returns the machine's entry, made when it has none. Called
// with p.mu held.
func (p *Prober) entryLocked(id string) *probeEntry {
	e := p.entries[id]
	if e == nil {
		e = &probeEntry{}
		p.entries[id] = e
	}
	return e
}

// stands reports whether e's observation stands without a probe: a
// machine that did not answer stands for the TTL, whatever follows it,
// since a watch or an events stream tells a machine's changes, not that
// it answers again. Called with p.mu held.
func (p *Prober) stands(e *probeEntry) bool {
	age := p.opts.Now().Sub(e.obs.At)
	if !e.obs.Connected {
		return age < p.opts.TTL
	}
	return e.watches > 0 || age < p.opts.TTL || e.events > 0 && age < eventsStand
}

// onEvents says that an events stream brings the machine's changes; the
// returned function says that it left the stream, and does so once.
func (p *Prober) onEvents(id string) (left func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entryLocked(id)
	e.events++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			e.events--
		})
	}
}

// followed reports whether a watch or an events stream follows the
// machine now.
func (p *Prober) followed(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[id]
	return e != nil && (e.watches > 0 || e.events > 0)
}

// onStream reports whether an events stream brings the machine's changes.
func (p *Prober) onStream(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[id]
	return e != nil && e.events > 0
}

// keepLocked makes obs the standing observation of e when stand is set,
// noting when the machine answered. Called with p.mu held.
func (p *Prober) keepLocked(e *probeEntry, obs Observation, stand bool) Observation {
	if obs.Connected {
		e.answered = obs.At
	}
	obs.LastAnswered = e.answered
	if stand {
		e.obs, e.have = obs, true
	}
	return obs
}

// keep makes obs, which a watch of the machine made, its standing
// observation, and returns it as kept.
func (p *Prober) keep(obs Observation) Observation {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entryLocked(obs.Machine)
	e.watched++
	return p.keepLocked(e, obs, true)
}

// watchOpen says that a watch keeps the machine's standing observation
// current; while one does, Observe probes it no more. The returned
// function says that this watch ended, and does so once. A machine may
// briefly have two watches, the one that replaces another and the one it
// replaces, which end in either order.
func (p *Prober) watchOpen(id string) (ended func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entryLocked(id)
	if e.watches++; e.watches == 1 {
		p.watching++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			// An entry that Forget dropped was counted out then.
			if e.watches--; e.watches == 0 && p.entries[id] == e {
				p.watching--
			}
		})
	}
}

// Watching returns how many machines have an open watch now, whose
// standing observation the watch keeps current.
func (p *Prober) Watching() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watching
}

// inventoryParts returns the parts of a machine's inventory a probe
// reads: all of them when the machine was not connected at its last
// observation (it connects now: a new boot may have new hardware), none
// when the last observation has them.
func inventoryParts(prev Observation, have bool) inventoryPart {
	if !have || !prev.Connected || prev.Hardware == nil && prev.Network == nil && prev.Schematic == nil {
		return allInventory
	}
	return 0
}

// withInventory carries the inventory of prev over into o when o read
// none of it, and reads it again when the machine changed its stage
// since prev (it rebooted, upgraded or was installed).
func withInventory(ctx context.Context, c *client.Client, o, prev Observation, parts inventoryPart) Observation {
	if !o.Connected || parts != 0 {
		return o
	}
	if o.TalosStage != prev.TalosStage {
		if err := o.readInventory(ctx, c, prev.archOf(), allInventory); err != nil {
			o.Error = strings.TrimPrefix(o.Error+"; "+err.Error(), "; ")
		}
	}
	return carryInventory(o, prev)
}

// carryInventory fills the parts of the inventory o has not from prev.
func carryInventory(o, prev Observation) Observation {
	if o.Hardware == nil {
		o.Hardware = prev.Hardware
	}
	if o.Network == nil {
		o.Network = prev.Network
	}
	if o.Schematic == nil {
		o.Schematic = prev.Schematic
	}
	return o
}

// archOf is the architecture o read with its hardware, "" without.
func (o Observation) archOf() string {
	if o.Hardware == nil {
		return ""
	}
	return o.Hardware.Arch
}

// probe makes one probe, within the concurrency bound and the timeout.
// The inventory is read when the machine connects or changed its stage
// since prev, the standing observation (have: there is one), and carried
// over from prev otherwise: never on a timer.
//
// A machine that does not answer within the timeout is asked once more,
// directly and on a new connection, before it shows as not connected (or
// not ready, when only its status came late): a late answer is as often a
// loaded machine, or a loaded server (a restart probes the whole fleet at
// once), as a machine gone, and a machine gone stays silent twice. One
// that refuses is not asked again. One that answers in time when asked
// again halves the probes that run at once (probeSlots).
func (p *Prober) probe(ctx context.Context, tenant string, bundle []byte, m Machine, prev Observation, have bool, inventory inventoryPart, viaGateway bool) Observation {
	epoch, err := p.slots.acquire(ctx)
	if err != nil {
		return Observation{Machine: m.ID, At: p.opts.Now(), Error: err.Error()}
	}
	slow := false
	defer func() {
		switch change, n := p.slots.release(epoch, slow); change {
		case slotsHalved:
			p.opts.Log.Warn("fewer probes run at once: a machine answered late, then in time when asked again on its own", "probe_slots", n, "tenant", tenant, "machine", m.ID)
		case slotsFull:
			p.opts.Log.Info("as many probes run at once as --probe-concurrency allows again", "probe_slots", n)
		}
	}()
	p.probes.Add(1)
	obs, late := p.attempt(ctx, tenant, bundle, m, prev, have, inventory, viaGateway)
	if late && ctx.Err() == nil {
		p.pool.Drop(tenant, bundle, m.Address)
		var lateAgain bool
		obs, lateAgain = p.attempt(ctx, tenant, bundle, m, prev, have, inventory, false)
		slow = obs.Connected && !lateAgain
	}
	return obs
}

// attempt asks the machine once, within the timeout: through the gateway
// first when viaGateway and there is one. late reports that the machine
// did not answer all that it was asked within the timeout: not Version,
// which would show it as not connected, or not its status, which would
// show it as not ready.
func (p *Prober) attempt(ctx context.Context, tenant string, bundle []byte, m Machine, prev Observation, have bool, inventory inventoryPart, viaGateway bool) (obs Observation, late bool) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if g := p.gatewayOf(tenant, m, viaGateway); g != "" {
		if obs := p.probeThrough(ctx, tenant, bundle, m, g, prev, have, inventory); obs.Connected {
			return obs, false
		}
		// The machine, or the gateway's way to it, did not answer: the
		// machine is asked directly, as without a gateway.
	}
	c, release, err := p.pool.Client(tenant, bundle, m.Address)
	if err != nil {
		return Observation{Machine: m.ID, At: p.opts.Now(), Error: err.Error()}, false
	}
	defer release()
	parts := inventoryParts(prev, have) | inventory
	obs = withInventory(ctx, c, observe(ctx, c, m, p.opts.Now(), parts, prev), prev, parts)
	if !obs.Connected && ctx.Err() == nil {
		p.pool.Drop(tenant, bundle, m.Address)
		obs = p.pool.maintenanceInventory(ctx, p.pool.withMaintenance(ctx, obs, m.Address), prev, m.Address)
	}
	// A call can fail for the deadline a hair before ctx says so: the
	// node's side of it, which has the deadline too, may end it first.
	return obs, obs.Error != "" && (errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Until(deadline) < p.opts.Timeout/20)
}

// forwards reports whether the standing observation of control plane id
// says that its apid can forward calls to the other machines: it answers,
// runs, and is not in maintenance mode.
func (p *Prober) forwards(id string) bool {
	o, ok := p.Last(id)
	return ok && o.Connected && !o.Maintenance && o.TalosStage == runtime.MachineStageRunning.String()
}

// gatewayOf is the address of a control plane through which a timed
// probe of m goes, "" when it goes directly: always for a machine last
// seen in maintenance mode.
func (p *Prober) gatewayOf(tenant string, m Machine, viaGateway bool) string {
	gw := p.gateway.Load()
	if !viaGateway || gw == nil {
		return ""
	}
	if o, ok := p.Last(m.ID); ok && o.Maintenance {
		return ""
	}
	if g := (*gw)(tenant, m); g != m.Address {
		return g
	}
	return ""
}

// probeThrough probes m through the pool's shared client of the control
// plane at gateway, in half the probe's time, so that a direct probe has the
// other half when it does not answer.
func (p *Prober) probeThrough(ctx context.Context, tenant string, bundle []byte, m Machine, gateway string, prev Observation, have bool, inventory inventoryPart) Observation {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout/2)
	defer cancel()
	c, release, err := p.pool.Client(tenant, bundle, gateway)
	if err != nil {
		return Observation{Machine: m.ID, At: p.opts.Now(), Error: err.Error()}
	}
	defer release()
	ctx = throughNode(ctx, m, gateway)
	parts := inventoryParts(prev, have) | inventory
	return withInventory(ctx, c, observe(ctx, c, m, p.opts.Now(), parts, prev), prev, parts)
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

// readOrReading reports whether machine id has been read, or a probe of
// it is in flight.
func (p *Prober) readOrReading(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[id]
	return e != nil && (e.have || e.inFlight != nil)
}

// Forget drops the observations of machines that are gone.
func (p *Prober) Forget(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if e := p.entries[id]; e != nil && e.inFlight == nil {
			if e.watches > 0 {
				p.watching--
			}
			delete(p.entries, id)
		}
	}
}
