package test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rezuscloud/rezuscloud/replica"
)

// TestReplicasSpreadByTenants: three tenants whose shards the replicas,
// spreading the shards by their number, would all give to one replica,
// come in one commit once the three replicas run. The leader records the
// tenants per shard and waits for the shards to move before it queues
// their runs, so that each replica holds one of the three and runs its
// tenant's tofu; the commit succeeds.
func TestReplicasSpreadByTenants(t *testing.T) {
	names := []string{"r0", "r1", "r2"}
	tenants := sameOwner(names, 3)
	e := newRepo(t)
	e.copyExamples()
	for _, dir := range []string{"production", "staging"} {
		if err := os.RemoveAll(filepath.Join(e.work.Dir(), e2eManifests, dir)); err != nil {
			t.Fatal(err)
		}
	}
	e.first = e.push("No tenants yet")
	rs := startRig(t, rigOptions{e: e})
	leader := rs.servers[rs.waitLeader(names...)]
	waitSucceeded(leader, e.first)

	for i, tenant := range tenants {
		copyStaging(t, e, tenant, fmt.Sprintf("127.250.8.%d:6443", i+1))
	}
	three := e.push("Three tenants whose shards one replica would hold")
	waitSucceeded(leader, three)
	cli := rs.etcd.Client(t)
	held := map[string]string{}
	for _, tenant := range tenants {
		h := shardHolder(cli, tenant)
		if h == "" || held[h] != "" {
			t.Errorf("%s is held by %q, which holds %q too", tenant, h, held[h])
		}
		held[h] = tenant
	}
	for _, name := range names {
		if runs := rs.servers[name].tofuRuns(); runs == 0 {
			t.Errorf("%s, which holds %s, ran no tofu", name, held[name])
		}
	}
	t.Logf("tenants by replica: %v", held)
}

// sameOwner returns n tenants, each in a shard of its own, that the
// shards spread by their number among names give to one replica.
func sameOwner(names []string, n int) []string {
	owners := replica.Assign(names, replica.Unweighted(replica.DefaultShards))
	var out []string
	shards := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("tenant-%d", i)
		s := replica.ShardOf(name, replica.DefaultShards)
		if owners[s] == names[0] && !shards[s] {
			shards[s] = true
			out = append(out, name)
		}
	}
	return out
}
