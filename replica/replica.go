package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of Config.
const (
	DefaultTTL    = 15 * time.Second
	DefaultShards = 64
)

// ErrNameInUse is returned by Join when a live replica has the name.
var ErrNameInUse = errors.New("replica name in use")

// Config configures Join.
type Config struct {
	// Client is the etcd client; the caller closes it after the replica.
	// Required.
	Client *clientv3.Client
	// Prefix is the prefix of the replicas' keys, e.g.
	// "/rezuscloud/replicas/". Required; a "/" is added when missing.
	Prefix string
	// Name is the replica's name, unique among the live replicas.
	// Required.
	Name string
	// Address is the base URL of the replica's API, as others reach it.
	Address string
	// TTL is the lease's TTL, whole seconds; 0 selects DefaultTTL. etcd
	// raises a TTL below its minimum (2 s by default).
	TTL time.Duration
	// Shards is how many shards tenants are spread over; 0 selects
	// DefaultShards. Every replica on one prefix must use the same.
	Shards int
	// Handover is how long the work of a shard this replica hands over
	// to another may go on before its contexts end; 0 selects TTL/3, a
	// negative value ends them at once.
	Handover time.Duration
	// Logger receives the replica's messages; nil discards them.
	Logger *slog.Logger
}

// Replica is this server's membership among the replicas.
type Replica struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger

	kickc chan struct{} // wakes the balancer

	mu      sync.Mutex
	ep      *epoch // the current membership; nil while fenced
	last    *epoch // the latest membership, fenced or not
	closed  bool
	view    view          // every key under the prefix
	viewed  chan struct{} // closed at the next change of the view
	changed chan struct{} // closed at the next change
	hooks   []func(key string, rev int64)
	running bool
}

// Join grants the replica's lease, registers it as a member and keeps
// the lease alive. It fails with ErrNameInUse when a live replica has
// cfg.Name. Run campaigns and balances shards; Close leaves without Run.
func Join(ctx context.Context, cfg Config) (*Replica, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:     cfg,
		cli:     cfg.Client,
		log:     cfg.Logger,
		kickc:   make(chan struct{}, 1),
		view:    view{prefix: cfg.Prefix},
		viewed:  make(chan struct{}),
		changed: make(chan struct{}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	ep, err := r.join(ctx)
	if err != nil {
		return nil, err
	}
	r.install(ep)
	return r, nil
}

// check validates cfg and fills in its defaults.
func (cfg *Config) check() error {
	switch {
	case cfg.Client == nil:
		return errors.New("replica: no etcd client")
	case cfg.Prefix == "":
		return errors.New("replica: no key prefix")
	case cfg.Name == "" || strings.Contains(cfg.Name, "/"):
		return fmt.Errorf("replica: name %q: want a non-empty name without /", cfg.Name)
	case cfg.TTL < 0 || cfg.Shards < 0:
		return fmt.Errorf("replica: TTL %s and shards %d: want no negative value", cfg.TTL, cfg.Shards)
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	cfg.TTL = cfg.TTL.Round(time.Second)
	if cfg.TTL < time.Second {
		cfg.TTL = time.Second
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Handover == 0 {
		cfg.Handover = cfg.TTL / 3
	}
	return nil
}

// Run campaigns for leadership and balances shards until ctx ends; after
// a fence it joins again, with a new lease, as soon as etcd answers. When
// ctx ends it ends every context it gave, waits until every done was
// called, and leaves: its lease is revoked, and with it its membership,
// its shards and its candidacy. Run is called once.
func (r *Replica) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("replica: Run called twice")
	}
	r.running = true
	ep, closed := r.last, r.closed
	r.mu.Unlock()
	if closed {
		return errors.New("replica: closed")
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.follow(ctx) })
	wg.Go(func() { r.balanceLoop(ctx) })
	for {
		ep.wg.Go(func() { r.campaign(ep) })
		select {
		case <-ctx.Done():
		case <-ep.ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		next, err := r.rejoin(ctx, ep)
		if err != nil {
			break
		}
		r.install(next)
		ep = next
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.leave(ep)
	wg.Wait()
	return nil
}

// Close leaves at once, for a replica whose Run was not called or has
// returned: its contexts end and its lease is revoked.
func (r *Replica) Close() error {
	r.mu.Lock()
	ep, closed := r.last, r.closed
	r.closed = true
	r.mu.Unlock()
	if closed {
		return nil
	}
	r.leave(ep)
	return nil
}

// install makes ep the current membership and tells the fence hooks.
func (r *Replica) install(ep *epoch) {
	r.mu.Lock()
	r.ep, r.last = ep, ep
	hooks := append([]func(string, int64){}, r.hooks...)
	r.signalLocked()
	r.mu.Unlock()
	for _, fn := range hooks {
		fn(ep.key, ep.rev)
	}
	r.kick()
	r.log.Info("replica: joined", "name", r.cfg.Name, "lease", fmt.Sprintf("%x", ep.lease), "fence", ep.rev)
}

// leave ends ep's contexts, waits for its work, and revokes its lease.
func (r *Replica) leave(ep *epoch) {
	r.mu.Lock()
	if r.ep == ep {
		r.ep = nil
		r.signalLocked()
	}
	r.mu.Unlock()
	ep.cancel(errLeft)
	ep.work.Wait()
	ep.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), r.opTimeout())
	defer cancel()
	if _, err := r.cli.Revoke(ctx, ep.lease); err != nil {
		r.log.Warn("replica: revoke the lease on leaving; it expires within its TTL", "err", err)
	}
}

// Changed returns a channel closed at the next change of this replica's
// shards, leadership or membership. Take it before looking at the state,
// then wait on it.
func (r *Replica) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// signalLocked closes the channel of Changed. r.mu is held.
func (r *Replica) signalLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// kick wakes the balancer.
func (r *Replica) kick() {
	select {
	case r.kickc <- struct{}{}:
	default:
	}
}

// Fence returns the key of the current membership, bound to the current
// lease, and its create revision; "" and 0 while fenced. A write
// conditional on that key's create revision fails once the lease is gone.
func (r *Replica) Fence() (key string, createRevision int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ep == nil {
		return "", 0
	}
	return r.ep.key, r.ep.rev
}

// Lease returns the current lease; clientv3.NoLease while fenced.
func (r *Replica) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ep == nil {
		return clientv3.NoLease
	}
	return r.ep.lease
}

// OnFence calls fn with the current fence, when there is one, and with
// every new one after a join with a new lease, before any shard or
// leadership of that lease is given. A fence is never taken back: a
// fenced replica keeps the old one until it joins again, and writes
// compared to it fail once its lease is gone.
func (r *Replica) OnFence(fn func(key string, rev int64)) {
	r.mu.Lock()
	r.hooks = append(r.hooks, fn)
	ep := r.ep
	r.mu.Unlock()
	if ep != nil {
		fn(ep.key, ep.rev)
	}
}

// Ready reports whether the replica is a live member: false while fenced
// or etcd has not renewed its lease for 2/3 of its TTL.
func (r *Replica) Ready() bool {
	_, ok := r.fresh()
	return ok
}

// ActUntil returns when this replica stops acting unless its lease is
// renewed before: 2/3 of the TTL after the last renewal, when it fences
// itself; the zero time while it is fenced. Work that outlives the
// process's own checks (a tofu apply, see tofu.Options.ActUntil) is
// held to it.
func (r *Replica) ActUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ep == nil || r.ep.ctx.Err() != nil {
		return time.Time{}
	}
	return r.ep.renewed.Add(r.fenceAfter())
}

// fresh returns the current membership when it is not fenced and its
// lease was renewed within 2/3 of the TTL; it fences a stale one.
func (r *Replica) fresh() (*epoch, bool) {
	r.mu.Lock()
	ep := r.ep
	stale := ep != nil && time.Since(ep.renewed) >= r.fenceAfter()
	r.mu.Unlock()
	if ep == nil || ep.ctx.Err() != nil {
		return nil, false
	}
	if stale {
		r.fence(ep, fmt.Errorf("lease not renewed for %s", r.fenceAfter()))
		return nil, false
	}
	return ep, true
}

// fenceAfter is how long without a renewal fences the replica.
func (r *Replica) fenceAfter() time.Duration { return r.cfg.TTL * 2 / 3 }

// opTimeout bounds one call to etcd.
func (r *Replica) opTimeout() time.Duration { return max(r.cfg.TTL/3, time.Second) }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
