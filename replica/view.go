package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The keys under Config.Prefix.
const (
	membersDir  = "members/"  // members/<name>: a record, bound to its lease
	shardsDir   = "shards/"   // shards/<n>: the holder's name, bound to its lease
	leaderDir   = "leader/"   // the election's keys
	tokensDir   = "tokens/"   // tokens/<hex digest>: a shared credential, bound to its minter's lease
	sessionsDir = "sessions/" // sessions/<hex digest>: a dashboard session, under a lease that ends with it
)

// record is the value of a member's key.
type record struct {
	Name    string    `json:"name"`
	Address string    `json:"address,omitempty"`
	Since   time.Time `json:"since"`
}

// holder is who holds a shard: a replica's name and its lease.
type holder struct {
	name  string
	lease clientv3.LeaseID
}

// view is this replica's copy of every key under the prefix, kept by a
// watch. It is guarded by Replica.mu.
type view struct {
	prefix string
	kvs    map[string]*mvccpb.KeyValue
}

// reset replaces the view with the keys of a read.
func (v *view) reset(kvs []*mvccpb.KeyValue) {
	v.kvs = make(map[string]*mvccpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		v.kvs[string(kv.Key)] = kv
	}
}

// apply applies the events of a watch.
func (v *view) apply(events []*clientv3.Event) {
	for _, ev := range events {
		if ev.Type == clientv3.EventTypeDelete {
			delete(v.kvs, string(ev.Kv.Key))
			continue
		}
		v.kvs[string(ev.Kv.Key)] = ev.Kv
	}
}

// members returns the live members' records by name.
func (v *view) members() map[string]record {
	out := map[string]record{}
	for k, kv := range v.kvs {
		name, ok := strings.CutPrefix(k, v.prefix+membersDir)
		if !ok {
			continue
		}
		var rec record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			rec = record{}
		}
		rec.Name = name
		out[name] = rec
	}
	return out
}

// holders returns the holder of every held shard.
func (v *view) holders() map[int]holder {
	out := map[int]holder{}
	for k, kv := range v.kvs {
		n, ok := strings.CutPrefix(k, v.prefix+shardsDir)
		if !ok {
			continue
		}
		s, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		out[s] = holder{name: string(kv.Value), lease: clientv3.LeaseID(kv.Lease)}
	}
	return out
}

// leader returns the elected leader's name: the election's key created
// first, as concurrency.Election decides.
func (v *view) leader() string {
	var name string
	var first int64
	for k, kv := range v.kvs {
		if !strings.HasPrefix(k, v.prefix+leaderDir) {
			continue
		}
		if first == 0 || kv.CreateRevision < first {
			name, first = string(kv.Value), kv.CreateRevision
		}
	}
	return name
}

// viewedLocked wakes those waiting for the view to change. r.mu is held.
func (r *Replica) viewedLocked() {
	close(r.viewed)
	r.viewed = make(chan struct{})
}

// shardKey is the key of shard s.
func (r *Replica) shardKey(s int) string {
	return r.cfg.Prefix + shardsDir + fmt.Sprintf("%04d", s)
}

// follow keeps the view up to date until ctx ends: a read of the prefix,
// then a watch from its revision, again after every failure.
func (r *Replica) follow(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.followOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("replica: following the members and shards", "err", err)
		sleep(ctx, r.cfg.TTL/6)
	}
}

// followOnce reads the prefix and watches it until the watch fails.
func (r *Replica) followOnce(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	resp, err := r.cli.Get(gctx, r.cfg.Prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("read %s: %w", r.cfg.Prefix, err)
	}
	r.mu.Lock()
	r.view.reset(resp.Kvs)
	r.viewedLocked()
	r.mu.Unlock()
	r.kick()
	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stop()
	wch := r.cli.Watch(wctx, r.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", r.cfg.Prefix, err)
		}
		r.mu.Lock()
		r.view.apply(wr.Events)
		r.viewedLocked()
		r.mu.Unlock()
		r.kick()
	}
	return fmt.Errorf("watch %s: closed", r.cfg.Prefix)
}
