package replica

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The shards are spread by their tenants. Tenants hash unevenly into a
// fixed number of shards (300 tenants into 64 shards leave one of three
// replicas about 37 % of them when each holds a third of the shards), so
// the leader records how many tenants each shard has (Spread), and every
// replica assigns the shards with those counts as weights. The counts are
// recorded again only when the assignment from the recorded ones leaves
// a replica noticeably more than an even share, so that a commit adding
// a tenant or two moves no shard, and with it no run.

// weightsKey is the key, under Config.Prefix, of the tenants per shard
// that the leader records: a JSON array with one count per shard.
const weightsKey = "weights"

// score is the rendezvous weight of member name for shard s: the member
// of highest score among the live ones should hold s.
func score(name string, s int) uint64 {
	sum := sha256.Sum256([]byte(name + "\x00" + strconv.Itoa(s)))
	return binary.BigEndian.Uint64(sum[:8])
}

// Assign returns which of members should hold each shard, weights[s]
// being the weight of shard s (its tenants): rendezvous hashing with
// bounded load. Every (member, shard) pair is taken in descending score,
// and a shard goes to the first member of its pairs that still has room
// for its weight; each member has room for an even share of the total
// weight, the first total%len(members) members, by name, one more. A
// shard that fits nowhere goes, heaviest first, to the member with the
// most room left; a shard of weight 0 to the member of highest score.
// So with weights of one each, counts differ by one at most, and a change
// of membership moves few shards besides those of the member that joined
// or left. Every replica computes the same answer from the same members
// and weights.
func Assign(members []string, weights []int) []string {
	out := make([]string, len(weights))
	if len(members) == 0 {
		return out
	}
	names := slices.Clone(members)
	slices.Sort(names)
	total := 0
	for _, w := range weights {
		total += max(w, 0)
	}
	room := make(map[string]int, len(names))
	for i, m := range names {
		room[m] = total / len(names)
		if i < total%len(names) {
			room[m]++
		}
	}
	for _, p := range pairs(names, len(weights)) {
		w := max(weights[p.shard], 0)
		if out[p.shard] == "" && room[p.member] >= w {
			out[p.shard] = p.member
			room[p.member] -= w
		}
	}
	var left []int
	for s, m := range out {
		if m == "" {
			left = append(left, s)
		}
	}
	slices.SortStableFunc(left, func(a, b int) int { return cmp.Compare(weights[b], weights[a]) })
	for _, s := range left {
		best := names[0]
		for _, m := range names[1:] {
			if room[m] > room[best] {
				best = m
			}
		}
		out[s] = best
		room[best] -= weights[s]
	}
	return out
}

// pair is a member's score for a shard.
type pair struct {
	score  uint64
	member string
	shard  int
}

// pairs returns every (member, shard) pair in descending score; ties,
// which SHA-256 makes unlikely, by member and shard.
func pairs(names []string, shards int) []pair {
	out := make([]pair, 0, len(names)*shards)
	for _, m := range names {
		for s := range shards {
			out = append(out, pair{score(m, s), m, s})
		}
	}
	slices.SortFunc(out, func(a, b pair) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := strings.Compare(a.member, b.member); c != 0 {
			return c
		}
		return cmp.Compare(a.shard, b.shard)
	})
	return out
}

// ones returns n weights of one: the shards spread by their number.
func Unweighted(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// weights returns the recorded tenants per shard, or weights of one each
// while none are recorded for this many shards.
func (v *view) weights(shards int) []int {
	kv := v.kvs[v.prefix+weightsKey]
	var w []int
	if kv == nil || json.Unmarshal(kv.Value, &w) != nil || len(w) != shards {
		return Unweighted(shards)
	}
	return w
}

// Spread records how many of tenants fall into each shard, when this
// replica leads and the shards, assigned by the counts recorded before
// (or by their number, while none are), leave a live replica more than
// spreadSlack above an even share of tenants. Every replica then assigns
// the shards by the new counts, and the shards that move are handed over
// as on a change of membership. It reports whether it recorded them.
func (r *Replica) Spread(ctx context.Context, tenants []string) (bool, error) {
	counts := make([]int, r.cfg.Shards)
	for _, t := range tenants {
		counts[ShardOf(t, r.cfg.Shards)]++
	}
	ep, ok := r.fresh()
	if !ok {
		return false, nil
	}
	r.mu.Lock()
	leads := ep.leader != nil && ep.leader.Err() == nil
	var names []string
	for name := range r.view.members() {
		names = append(names, name)
	}
	recorded := r.view.weights(r.cfg.Shards)
	r.mu.Unlock()
	if !leads || slices.Equal(recorded, counts) || even(Assign(names, recorded), counts, len(names)) {
		return false, nil
	}
	val, err := json.Marshal(counts)
	if err != nil {
		return false, err
	}
	tctx, cancel := context.WithTimeout(ctx, r.opTimeout())
	defer cancel()
	resp, err := r.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.LeaseValue(ep.key), "=", ep.lease)).
		Then(clientv3.OpPut(r.cfg.Prefix+weightsKey, string(val))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("replica %s: record the tenants per shard: %w", r.cfg.Name, err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	if !r.settle(ctx, counts, r.cfg.TTL) {
		r.log.Warn("replica: the shards with tenants did not reach their new holders within the lease TTL; their runs go to the replicas that hold them now", "ttl", r.cfg.TTL)
	}
	return true, nil
}

// settle waits, for at most limit, until this replica's view has counts
// as the recorded weights and every shard with a tenant is held by the
// live member they assign it to, so that the runs queued next go to the
// replicas that keep the tenants instead of to those handing them over.
// It reports whether they got there.
func (r *Replica) settle(ctx context.Context, counts []int, limit time.Duration) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		r.mu.Lock()
		done, viewed := r.settledLocked(counts), r.viewed
		r.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-viewed:
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		}
	}
}

// settledLocked reports whether the view holds the shards as counts
// assign them among its members. r.mu is held.
func (r *Replica) settledLocked(counts []int) bool {
	if !slices.Equal(r.view.weights(r.cfg.Shards), counts) {
		return false
	}
	members := r.view.members()
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	owners := Assign(names, counts)
	holders := r.view.holders()
	for s, c := range counts {
		if c > 0 && holders[s].name != owners[s] {
			return false
		}
	}
	return true
}

// even reports whether owners give no member more than spreadSlack above
// an even share of the tenants that counts put into the shards.
func even(owners []string, counts []int, members int) bool {
	if members == 0 {
		return true
	}
	load := map[string]int{}
	total := 0
	for s, c := range counts {
		load[owners[s]] += c
		total += c
	}
	share := (total + members - 1) / members
	for _, l := range load {
		if l > share+spreadSlack(share) {
			return false
		}
	}
	return true
}

// spreadSlack is how far above an even share of tenants a replica may be
// before Spread records the counts again: 5 %, and at least one tenant.
func spreadSlack(share int) int { return max(1, share/20) }
