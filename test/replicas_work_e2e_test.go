package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/replica"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReplicasCheckAndBackUpOnTheOwner: a tenant's drift checks and etcd
// backups happen on the replica that owns it, as its runs do. Three
// tenants, one for each replica, are applied. The leader schedules their
// drift checks, every 2 s: once each tenant's shard is with its owner,
// every replica runs tofu for the check of its tenant, with no commit
// to apply, and each tenant's Drifted condition is recorded. The leader
// takes the backups asked of it on any replica; the owners that do not
// lead take them and log so, and every tenant's status counts its backup.
func TestReplicasCheckAndBackUpOnTheOwner(t *testing.T) {
	e := newRepo(t)
	e.copyExamples()
	if err := os.RemoveAll(filepath.Join(e.work.Dir(), e2eManifests, "production")); err != nil {
		t.Fatal(err)
	}
	names := []string{"r0", "r1", "r2"}
	owners := tenantsForEach(names)
	i := 0
	for tenant := range owners {
		if tenant != "staging" {
			i++
			copyStaging(t, e, tenant, fmt.Sprintf("127.250.7.%d:6443", i))
		}
	}
	for tenant := range owners {
		e.edit(e2eManifests+"/"+tenant+"/tenant.yaml", "  plugins:\n", "  backup:\n    schedule: \"0 3 * * *\"\n    keep: 2\n  plugins:\n")
	}
	e.first = e.push("Three tenants with backups")
	rs := startRig(t, rigOptions{e: e, env: backupEnv, args: []string{"--drift-interval", "2s", "--backup-store", "file://" + t.TempDir(), "--backup-timeout", "20s"}})
	leaderName := rs.waitLeader(names...)
	leader := rs.servers[leaderName]
	waitSucceeded(leader, e.first)
	cli := rs.etcd.Client(t)
	leader.WaitFor("each tenant's shard with its owner", func() bool {
		for tenant, owner := range owners {
			if shardHolder(cli, tenant) != owner {
				return false
			}
		}
		return true
	})
	t.Logf("owners %v, leader %s", owners, leaderName)

	runs := map[string]int64{}
	for _, name := range names {
		runs[name] = rs.servers[name].tofuRuns()
	}
	for tenant := range owners {
		leader.WaitFor(tenant+"'s drift check recorded", func() bool {
			c := fetchTenant(leader, tenant).Status.Conditions.Get(schema.ConditionDrifted)
			return c != nil && c.Status == schema.ConditionFalse
		})
	}
	for _, name := range names {
		s := rs.servers[name]
		s.WaitFor(name+" to check the drift of the tenant it owns", func() bool { return s.tofuRuns() >= runs[name]+2 })
	}

	for tenant := range owners {
		resp, err := http.Post(rs.lb.url()+"/api/v1/tenants/"+tenant+"/backups", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST backups of %s: %s", tenant, resp.Status)
		}
	}
	for tenant, owner := range owners {
		var b *schema.BackupStatus
		leader.WaitFor(tenant+"'s requested backup", func() bool {
			b = fetchTenant(leader, tenant).Status.Backup
			return b != nil && !b.LastAttempt.IsZero()
		})
		if b.LastError != "" || b.LastSuccess.IsZero() || b.Count != 1 {
			t.Errorf("%s's backup: %+v", tenant, b)
		}
		for _, name := range names {
			took := strings.Contains(rs.servers[name].Log(), `msg="etcd backup for the leader" component=reconciler tenant=`+tenant+" ")
			if want := owner == name && name != leaderName; took != want {
				t.Errorf("%s took %s's backup for the leader: %v, want %v", name, tenant, took, want)
			}
		}
	}
}

// fetchTenant returns the tenant as s serves it.
func fetchTenant(s *e2eServer, name string) schema.Tenant {
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/"+name, &tn)
	return tn
}

// tenantsForEach returns staging and other tenants, by the replica among
// names that owns each once they all run: one for each replica.
func tenantsForEach(names []string) map[string]string {
	assigned := replica.Assign(names, replica.Unweighted(replica.DefaultShards))
	owner := func(tenant string) string { return assigned[replica.ShardOf(tenant, replica.DefaultShards)] }
	out := map[string]string{"staging": owner("staging")}
	taken := map[string]bool{owner("staging"): true}
	for i := 0; len(out) < len(names); i++ {
		name := fmt.Sprintf("tenant-%d", i)
		if o := owner(name); !taken[o] {
			taken[o] = true
			out[name] = o
		}
	}
	return out
}

// copyStaging adds to the work tree a tenant named name, made from the
// repository's staging example, with the loopback control-plane endpoint
// endpoint.
func copyStaging(t *testing.T, e *e2e, name, endpoint string) {
	t.Helper()
	for _, f := range []string{"tenant.yaml", "nodegroups.yaml", "patches.yaml"} {
		b, err := os.ReadFile(filepath.Join(testenv.Root(), "examples", "staging", f))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "staging", name)
		e.work.Write(e2eManifests+"/"+name+"/"+f, strings.ReplaceAll(s, "https://127.250.0.2:6443", "https://"+endpoint))
	}
}
