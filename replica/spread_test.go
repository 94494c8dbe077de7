package replica

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
)

// fleet returns n tenants named as the throughput benchmark names them.
func fleet(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("bench-%03d", i)
	}
	return out
}

// countsOf returns how many of tenants fall into each of shards shards.
func countsOf(tenants []string, shards int) []int {
	out := make([]int, shards)
	for _, t := range tenants {
		out[ShardOf(t, shards)]++
	}
	return out
}

// loads returns the tenants each member holds under owners.
func loads(owners []string, counts []int) map[string]int {
	out := map[string]int{}
	for s, c := range counts {
		out[owners[s]] += c
	}
	return out
}

// TestAssignByTenants: 300 tenants hash unevenly into 64 shards, so
// shards spread by their number leave one of three replicas well above a
// third of the tenants; weighted by their tenants, every replica is
// within the slack of a third, whatever the members' order, every shard
// is assigned, and one tenant more needs no new weights.
func TestAssignByTenants(t *testing.T) {
	n := DefaultShards
	names := []string{"r0", "r1", "r2"}
	tenants := fleet(300)
	counts := countsOf(tenants, n)
	share := (len(tenants) + len(names) - 1) / len(names)

	byNumber := loads(Assign(names, Unweighted(n)), counts)
	if even(Assign(names, Unweighted(n)), counts, len(names)) {
		t.Fatalf("shards spread by their number hold %v of 300 tenants: want one above %d", byNumber, share+spreadSlack(share))
	}
	owners := Assign(names, counts)
	if !slices.Equal(owners, Assign([]string{"r2", "r0", "r1"}, counts)) {
		t.Error("the weighted assignment depends on the members' order")
	}
	for s, m := range owners {
		if m == "" {
			t.Fatalf("shard %d unassigned", s)
		}
	}
	byTenants := loads(owners, counts)
	for m, l := range byTenants {
		if l > share+spreadSlack(share) || l < share-2*spreadSlack(share) {
			t.Errorf("%s holds %d of 300 tenants, want %d±%d", m, l, share, spreadSlack(share))
		}
	}
	if !even(owners, countsOf(append(tenants, "bench-300"), n), len(names)) {
		t.Error("one tenant more makes the weighted assignment uneven")
	}
	t.Logf("tenants by the shards' number: %v; by their tenants: %v", byNumber, byTenants)
}

// TestSpread: the leader records the tenants per shard when the shards
// spread by number leave a replica above its share, and the replicas
// hand the shards over until they hold them as the weighted assignment
// gives them; the same tenants, or one more, record nothing; a replica
// that does not lead records nothing. Never do two replicas act on one
// shard at once.
func TestSpread(t *testing.T) {
	c := etcdtest.Start(t, 1)
	chk := newChecker(t)
	n := DefaultShards
	names := []string{"r0", "r1", "r2"}
	ms := map[string]*member{}
	for _, name := range names {
		ms[name] = start(t, chk, name, c.Endpoints()...)
	}
	chk.wait(10*time.Second, "three replicas hold every shard", assigned(n, names...))
	chk.wait(testTTL, "a leader", func(_ map[int]string, l string) bool { return l != "" })
	leader := ms[chk.leaderName()]
	var follower *member
	for _, m := range ms {
		if m != leader {
			follower = m
		}
	}

	tenants := fleet(300)
	if wrote, err := follower.r.Spread(t.Context(), tenants); err != nil || wrote {
		t.Fatalf("a follower's Spread: wrote %v, %v; want nothing written", wrote, err)
	}
	if wrote, err := leader.r.Spread(t.Context(), tenants); err != nil || !wrote {
		t.Fatalf("the leader's Spread: wrote %v, %v; want the counts written", wrote, err)
	}
	counts := countsOf(tenants, n)
	leader.r.mu.Lock()
	settled := leader.r.settledLocked(counts)
	leader.r.mu.Unlock()
	if !settled {
		t.Errorf("the leader's Spread returned before the shards with tenants reached their new holders in its view")
	}
	took := chk.wait(2*testTTL, "the shards follow their tenants", assignedBy(counts, names...))
	t.Logf("shards weighted by tenants within %s", took)

	share := len(tenants) / len(names)
	waitUntil(t, testTTL, "every replica's status shows an even share", func() bool {
		for _, m := range ms {
			for _, mem := range m.r.Status(tenants).Members {
				if mem.Tenants > share+spreadSlack(share) {
					return false
				}
			}
		}
		return true
	})
	for _, more := range [][]string{tenants, append(slices.Clone(tenants), "bench-300")} {
		if wrote, err := leader.r.Spread(t.Context(), more); err != nil || wrote {
			t.Errorf("Spread of %d tenants after the counts of 300: wrote %v, %v; want nothing written", len(more), wrote, err)
		}
	}
}
