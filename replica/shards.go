package replica

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// shard is a shard this replica holds under an epoch's lease.
type shard struct {
	ctx    context.Context
	cancel context.CancelFunc
	refs   int         // Acquires whose done was not called
	handed *time.Timer // non-nil while the shard is handed over
}

// ShardOf returns the shard of a tenant among shards: FNV-1a of its
// name, modulo shards. Every replica and every version must agree, so it
// never changes.
func ShardOf(tenant string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(shards))
}

// Owns reports whether this replica holds the tenant's shard now and
// gives it work: false while fenced or while the shard is handed over.
func (r *Replica) Owns(tenant string) bool {
	ep, ok := r.fresh()
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sh := ep.shards[ShardOf(tenant, r.cfg.Shards)]
	return sh != nil && sh.handed == nil && sh.ctx.Err() == nil
}

// Holder returns the live replica that holds the tenant's shard, with
// the base URL of its API, as this replica last saw them in etcd; ok is
// false while no live replica holds it (a shard between two holders).
func (r *Replica) Holder(tenant string) (name, address string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, held := r.view.holders()[ShardOf(tenant, r.cfg.Shards)]
	if !held {
		return "", "", false
	}
	rec, live := r.view.members()[h.name]
	return h.name, rec.Address, live
}

// Acquire returns a context for work on the tenant, which ends when this
// replica fences itself or hands the tenant's shard over (after
// Config.Handover), and done, which the caller calls once its work under
// ctx has stopped. ok is false, and ctx nil, when this replica does not
// own the tenant. A shard is released only after every done of its work
// was called.
func (r *Replica) Acquire(tenant string) (ctx context.Context, done func(), ok bool) {
	ep, ok := r.fresh()
	if !ok {
		return nil, func() {}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sh := ep.shards[ShardOf(tenant, r.cfg.Shards)]
	if sh == nil || sh.handed != nil || sh.ctx.Err() != nil {
		return nil, func() {}, false
	}
	sh.refs++
	ep.work.Add(1)
	ctx, cancel := context.WithCancel(sh.ctx)
	var once sync.Once
	done = func() {
		once.Do(func() {
			cancel()
			r.mu.Lock()
			sh.refs--
			idle := sh.refs == 0 && sh.handed != nil
			r.mu.Unlock()
			ep.work.Done()
			if idle {
				r.kick()
			}
		})
	}
	return ctx, done, true
}

// balanceLoop balances shards whenever the view, a membership or a
// shard's work changes, and every TTL/3, until ctx ends.
func (r *Replica) balanceLoop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kickc:
		case <-tick.C:
		}
		r.balance(ctx)
	}
}

// balance takes the free shards this replica should hold, starts handing
// over those it should not, and releases those handed over whose work is
// done.
func (r *Replica) balance(ctx context.Context) {
	ep, ok := r.fresh()
	if !ok {
		return
	}
	take, release := r.plan(ep)
	for _, s := range take {
		r.take(ctx, ep, s)
	}
	for _, s := range release {
		r.release(ctx, ep, s)
	}
}

// plan compares the shards ep holds with those it should, from the view.
func (r *Replica) plan(ep *epoch) (take, release []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for name := range r.view.members() {
		names = append(names, name)
	}
	holders := r.view.holders()
	owners := Assign(names, r.view.weights(r.cfg.Shards))
	for s := range r.cfg.Shards {
		want := owners[s] == r.cfg.Name
		sh := ep.shards[s]
		switch {
		case sh == nil:
			if _, held := holders[s]; want && !held {
				take = append(take, s)
			}
		case want && sh.handed == nil:
		case want && sh.handed.Stop():
			// Wanted again before its work was told to stop.
			sh.handed = nil
			r.signalLocked()
		default:
			// Not wanted, or wanted again after its work was told to
			// stop: released once that work is done, then taken anew.
			if sh.handed == nil {
				sh.handed = time.AfterFunc(max(r.cfg.Handover, 0), sh.cancel)
				r.signalLocked()
			}
			if sh.refs == 0 {
				release = append(release, s)
			}
		}
	}
	return take, release
}

// take puts shard s's key if it is absent, bound to ep's lease.
func (r *Replica) take(ctx context.Context, ep *epoch, s int) {
	key := r.shardKey(s)
	tctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	resp, err := r.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, r.cfg.Name, clientv3.WithLease(ep.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		r.log.Warn("replica: take a shard", "shard", s, "err", err)
		return
	}
	if !resp.Succeeded {
		// Held by another, or by this lease already: a take whose answer
		// was lost.
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != ep.lease {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adoptLocked(ep, s)
}

// adoptLocked records shard s as held by ep. r.mu is held.
func (r *Replica) adoptLocked(ep *epoch, s int) *shard {
	if sh := ep.shards[s]; sh != nil {
		return sh
	}
	sh := &shard{}
	sh.ctx, sh.cancel = context.WithCancel(ep.ctx)
	ep.shards[s] = sh
	r.signalLocked()
	return sh
}

// release deletes shard s's key, if ep's lease still holds it, once its
// work is done.
func (r *Replica) release(ctx context.Context, ep *epoch, s int) {
	key := r.shardKey(s)
	tctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	_, err := r.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", ep.lease)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		r.log.Warn("replica: release a shard", "shard", s, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if sh := ep.shards[s]; sh != nil && sh.refs == 0 {
		if sh.handed != nil {
			sh.handed.Stop()
		}
		sh.cancel()
		delete(ep.shards, s)
		r.signalLocked()
	}
}
