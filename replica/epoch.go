package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// errLeft ends the contexts of a replica that leaves.
var errLeft = errors.New("the replica left")

// epoch is one membership of the replica: one lease, its membership key
// and everything held under it. It ends with a fence or when the replica
// leaves; a later membership is a new epoch.
type epoch struct {
	lease   clientv3.LeaseID
	session *concurrency.Session
	key     string // the membership key
	rev     int64  // its create revision: the fence
	ctx     context.Context
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup // the epoch's goroutines
	work    sync.WaitGroup // every Acquire whose done was not called

	// Guarded by Replica.mu.
	renewed time.Time // when the lease was last renewed
	shards  map[int]*shard
	leader  context.Context // nil unless leader
}

// join grants a new lease, registers the membership under it, and keeps
// the lease alive.
func (r *Replica) join(ctx context.Context) (*epoch, error) {
	sent := time.Now()
	gctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	grant, err := r.cli.Grant(gctx, int64(r.cfg.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("replica %s: grant a lease: %w", r.cfg.Name, err)
	}
	ep := &epoch{lease: grant.ID, key: r.cfg.Prefix + membersDir + r.cfg.Name, renewed: sent, shards: map[int]*shard{}}
	ep.ctx, ep.cancel = context.WithCancelCause(context.Background())
	if err := r.register(gctx, ep); err != nil {
		ep.cancel(err)
		r.revoke(ep.lease)
		return nil, err
	}
	kach, err := r.cli.KeepAlive(ep.ctx, ep.lease)
	if err == nil {
		ep.session, err = concurrency.NewSession(r.cli, concurrency.WithLease(ep.lease), concurrency.WithContext(ep.ctx))
	}
	if err != nil {
		ep.cancel(err)
		r.revoke(ep.lease)
		return nil, fmt.Errorf("replica %s: keep the lease alive: %w", r.cfg.Name, err)
	}
	ep.wg.Go(func() { r.watchdog(ep, kach) })
	return ep, nil
}

// register puts the membership key if it is absent, bound to ep's lease.
func (r *Replica) register(ctx context.Context, ep *epoch) error {
	val, err := json.Marshal(record{Name: r.cfg.Name, Address: r.cfg.Address, Since: time.Now().UTC()})
	if err != nil {
		return err
	}
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ep.key), "=", 0)).
		Then(clientv3.OpPut(ep.key, string(val), clientv3.WithLease(ep.lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("replica %s: register: %w", r.cfg.Name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("replica %s: %w: %s exists", r.cfg.Name, ErrNameInUse, ep.key)
	}
	ep.rev = resp.Header.Revision
	return nil
}

// rejoin joins again after old was fenced, once etcd answers: after
// old's work is done (or its lease surely expired) it revokes old's
// lease, so that its shards are free, then joins with a new lease.
func (r *Replica) rejoin(ctx context.Context, old *epoch) (*epoch, error) {
	r.waitWork(ctx, old)
	revoked := false
	for ctx.Err() == nil {
		if !revoked {
			revoked = r.revoke(old.lease)
		}
		if revoked {
			ep, err := r.join(ctx)
			if err == nil {
				return ep, nil
			}
			r.log.Warn("replica: join again after the fence", "err", err)
		}
		sleep(ctx, r.cfg.TTL/6)
	}
	return nil, ctx.Err()
}

// waitWork waits until every done of ep's work was called, or until its
// lease has surely expired, or ctx ends.
func (r *Replica) waitWork(ctx context.Context, ep *epoch) {
	r.mu.Lock()
	expiry := ep.renewed.Add(r.cfg.TTL)
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { ep.work.Wait(); close(done) }()
	t := time.NewTimer(time.Until(expiry))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.log.Warn("replica: work of the fenced membership still runs after its lease expired")
	case <-ctx.Done():
	}
}

// revoke revokes a lease and reports whether it is gone.
func (r *Replica) revoke(lease clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), r.opTimeout())
	defer cancel()
	_, err := r.cli.Revoke(ctx, lease)
	return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// watchdog records every renewal of ep's lease and fences the replica
// when none came for 2/3 of the TTL or the lease is lost.
func (r *Replica) watchdog(ep *epoch, kach <-chan *clientv3.LeaseKeepAliveResponse) {
	limit := r.fenceAfter()
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case <-ep.ctx.Done():
			return
		case resp, ok := <-kach:
			if !ok || resp.TTL <= 0 {
				r.fence(ep, errors.New("the lease is lost"))
				return
			}
			r.mu.Lock()
			ep.renewed = time.Now()
			r.mu.Unlock()
			t.Reset(limit)
		case <-t.C:
			r.fence(ep, fmt.Errorf("lease not renewed for %s", limit))
			return
		}
	}
}

// fence ends every context of ep at once and makes the replica not
// ready; Run joins again with a new lease.
func (r *Replica) fence(ep *epoch, cause error) {
	r.mu.Lock()
	if ep.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	ep.cancel(cause)
	if r.ep == ep {
		r.ep = nil
		r.signalLocked()
	}
	r.mu.Unlock()
	r.log.Warn("replica: fenced", "name", r.cfg.Name, "lease", fmt.Sprintf("%x", ep.lease), "cause", cause)
}

// campaign runs for leadership under ep until ep ends.
func (r *Replica) campaign(ep *epoch) {
	e := concurrency.NewElection(ep.session, r.cfg.Prefix+leaderDir)
	for {
		err := campaignOnce(ep.ctx, e, r.cfg.Name)
		if ep.ctx.Err() != nil {
			return
		}
		if err == nil {
			break
		}
		r.log.Warn("replica: campaign", "err", err)
		sleep(ep.ctx, r.cfg.TTL/6)
	}
	lctx, cancel := context.WithCancel(ep.ctx)
	defer cancel()
	r.mu.Lock()
	if ep.ctx.Err() == nil {
		ep.leader = lctx
		r.signalLocked()
	}
	r.mu.Unlock()
	r.log.Info("replica: elected leader", "name", r.cfg.Name)
	<-ep.ctx.Done()
}

// campaignOnce is e.Campaign, which returns as soon as ctx ends. An
// election whose context ends while it waits cleans up after itself with
// the client's own context, which does not end before the client
// closes: cut off from etcd, that clean-up would hold up the epoch's end
// (leave), and so a stop, until etcd answers again. It finishes in the
// background instead; the epoch's lease, which leave revokes or lets
// expire, removes its key all the same.
func campaignOnce(ctx context.Context, e *concurrency.Election, name string) error {
	done := make(chan error, 1)
	go func() { done <- e.Campaign(ctx, name) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leader returns a context that ends when this replica's leadership
// ends, and whether it is the leader now.
func (r *Replica) Leader() (ctx context.Context, ok bool) {
	ep, ok := r.fresh()
	if !ok {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ep.leader == nil || ep.leader.Err() != nil {
		return nil, false
	}
	return ep.leader, true
}
