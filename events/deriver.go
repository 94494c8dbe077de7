package events

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// DefaultMachineNotReadyAfter is how long a machine may be not ready
// before MachineNotReady tells of it, unless Options say otherwise.
const DefaultMachineNotReadyAfter = 5 * time.Minute

// DefaultMaxPending bounds the changes that wait for the deriver.
const DefaultMaxPending = 100_000

// retryLoad is how long Run waits before it reads the store again after
// a read failed.
const retryLoad = 5 * time.Second

// Options configure a Deriver. Store and Sink are required.
type Options struct {
	Store store.Store
	Sink  notify.Sink
	// ExternalURL is the base URL under which people reach the dashboard
	// (--external-url): events link to a tenant's page, or a commit's,
	// under it. Empty: events carry no link.
	ExternalURL string
	// MachineNotReadyAfter is how long a machine may be not ready before
	// MachineNotReady tells of it. Default DefaultMachineNotReadyAfter.
	MachineNotReadyAfter time.Duration
	// Clock is the time events go by; nil is the system's.
	Clock Clock
	// Registerer, when set, gets the deriver's metrics.
	Registerer prometheus.Registerer
	// MaxPending bounds the changes that wait for the deriver while it is
	// busy: past it they are dropped, and the deriver loads its state from
	// the store again (which tells nothing of what happened meanwhile).
	// Default DefaultMaxPending.
	MaxPending int
	Logger     *slog.Logger
}

// Deriver derives events from the store's changes (see the package doc).
// New registers it with the store; it derives while Run runs.
type Deriver struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	active   bool           // Run runs: the hook queues changes
	pending  []store.Change // changes of the kinds followed, in commit order
	top      uint64         // the revision of the last change queued, of any kind
	overflow bool           // pending went past MaxPending and was dropped
	wake     chan struct{}
	running  atomic.Bool

	// done is the revision up to which changes have been derived; busy
	// and derivedChanges are the time spent deriving and the changes
	// derived, for the benchmarks.
	done           atomic.Uint64
	busy           atomic.Int64
	derivedChanges atomic.Int64

	// What Run's goroutine keeps; only it touches these.
	tenants  map[string]*tenant
	machines map[string]*machine
	// commits are the commits whose refusal was told, or that the store
	// held when Run started (whatever they were, it was told before).
	commits  map[string]bool
	subjects map[string]string // commit subjects by SHA
	// nextCheck is when a not-ready machine is due; zero: none is.
	nextCheck time.Time

	derived *prometheus.CounterVec
	resyncs prometheus.Counter
}

// New returns a deriver of opts.Store's changes, registered with it. It
// derives nothing until Run.
func New(opts Options) (*Deriver, error) {
	if opts.Store == nil || opts.Sink == nil {
		return nil, errors.New("events: Store and Sink are required")
	}
	if opts.MachineNotReadyAfter <= 0 {
		opts.MachineNotReadyAfter = DefaultMachineNotReadyAfter
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Deriver{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1),
		derived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rezuscloud_events_derived_total",
			Help: "Events derived from the store's changes for the notifications, by reason."}, []string{"reason"}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{Name: "rezuscloud_events_resyncs_total",
			Help: "Times the deriver of events fell behind the store's changes, dropped them and loaded its state again."}),
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(d.derived); err != nil {
			return nil, err
		}
		if err := opts.Registerer.Register(d.resyncs); err != nil {
			return nil, err
		}
	}
	opts.Store.OnCommit(d.hook)
	return d, nil
}

// followed reports whether the deriver reads changes of kind.
func followed(kind string) bool {
	return kind == schema.KindTenant || kind == schema.KindMachine || kind == schema.KindCommit
}

// hook queues a commit's changes for Run; it runs while the store's next
// Update waits, so it only appends.
func (d *Deriver) hook(changes []store.Change) {
	d.mu.Lock()
	if !d.active {
		d.mu.Unlock()
		return
	}
	for _, c := range changes {
		d.top = max(d.top, c.Resource.ResourceVersion)
		if !d.overflow && followed(c.Resource.Kind) {
			d.pending = append(d.pending, c)
		}
	}
	if len(d.pending) > d.opts.MaxPending {
		d.pending, d.overflow = nil, true
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run derives events from the store's changes until ctx ends. It first
// loads the state to compare with from the store. Only one Run runs at a
// time; it may run again after it returned (a replica that leads again).
func (d *Deriver) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("events: the deriver runs already")
	}
	defer d.running.Store(false)
	d.mu.Lock()
	d.active, d.pending, d.overflow, d.top = true, nil, false, 0
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.active, d.pending = false, nil
		d.mu.Unlock()
	}()
	from, err := d.loadUntil(ctx)
	if err != nil {
		return nil // ctx ended
	}
	var timer <-chan time.Time
	var armed time.Time
	for {
		if from, err = d.derivePending(ctx, from); err != nil {
			return nil
		}
		if !d.nextCheck.Equal(armed) {
			armed, timer = d.nextCheck, nil
			if !armed.IsZero() {
				timer = d.opts.Clock.After(max(armed.Sub(d.opts.Clock.Now()), 0))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-timer:
			armed, timer = time.Time{}, nil
			d.send(d.checkMachines())
		}
	}
}

// loadUntil loads the state, again after a failure, until it succeeds or
// ctx ends. It returns the store's revision the state is as of.
func (d *Deriver) loadUntil(ctx context.Context) (uint64, error) {
	for {
		rv, err := d.load()
		if err == nil {
			d.done.Store(rv)
			return rv, nil
		}
		d.log.Error("notifications: read the store to derive events from; trying again", "err", err, "in", retryLoad)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(retryLoad):
		}
	}
}

// derivePending derives the events of the changes queued after revision
// from, and sends them; after an overflow it loads the state again. It
// returns the revision derived up to.
func (d *Deriver) derivePending(ctx context.Context, from uint64) (uint64, error) {
	d.mu.Lock()
	batch, top, overflow := d.pending, d.top, d.overflow
	d.pending, d.overflow = nil, false
	d.mu.Unlock()
	if overflow {
		d.resyncs.Inc()
		d.log.Warn("notifications: the store changed faster than events were derived; the changes in between were dropped, and what they did is not told", "max_pending", d.opts.MaxPending)
		return d.loadUntil(ctx)
	}
	start := time.Now()
	var out []notify.Event
	for _, c := range batch {
		if c.Resource.ResourceVersion <= from {
			continue // the state loaded shows it already
		}
		out = append(out, d.derive(c)...)
	}
	d.send(out)
	d.busy.Add(int64(time.Since(start)))
	d.derivedChanges.Add(int64(len(batch)))
	if top > from {
		from = top
	}
	d.done.Store(max(d.done.Load(), from))
	return from, nil
}

// derive returns the events of one change.
func (d *Deriver) derive(c store.Change) []notify.Event {
	var evs []notify.Event
	var err error
	switch c.Resource.Kind {
	case schema.KindTenant:
		evs, err = d.tenantChanged(c)
	case schema.KindMachine:
		evs, err = d.machineChanged(c)
	case schema.KindCommit:
		evs, err = d.commitChanged(c)
	}
	if err != nil {
		d.log.Warn("notifications: a change that events cannot be derived from", "kind", c.Resource.Kind, "name", c.Resource.Name, "err", err)
	}
	return evs
}

// send hands events to the sink.
func (d *Deriver) send(evs []notify.Event) {
	for _, ev := range evs {
		d.derived.WithLabelValues(string(ev.Reason)).Inc()
		d.opts.Sink.Notify(ev)
	}
}

// load reads the state to compare with from the store, in one
// transaction, and returns the store's revision it is as of.
func (d *Deriver) load() (rv uint64, err error) {
	d.tenants, d.machines, d.commits, d.subjects = map[string]*tenant{}, map[string]*machine{}, map[string]bool{}, map[string]string{}
	now := d.opts.Clock.Now()
	var told map[string]bool
	err = d.opts.Store.View(func(tx store.Tx) error {
		rv = tx.ResourceVersion()
		if err := tx.Scan(schema.KindCommit, "", func(r store.Resource) error {
			d.commits[r.Name] = true
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Scan(schema.KindTenant, "", func(r store.Resource) error {
			return d.loadTenant(tx, r)
		}); err != nil {
			return err
		}
		if told, err = loadTold(tx); err != nil {
			return err
		}
		return tx.Scan(schema.KindMachine, "", func(r store.Resource) error {
			return d.loadMachine(r, now, told)
		})
	})
	if err == nil {
		d.forgetTold(told)
	}
	d.planChecks()
	return rv, err
}

// forgetTold removes the records of told (see toldPrefix) of machines
// that are gone, or ready, since a server last ran.
func (d *Deriver) forgetTold(told map[string]bool) {
	var stale []string
	for name := range told {
		if m := d.machines[name]; m == nil || !m.told {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	d.recordTold(stale, false)
}
