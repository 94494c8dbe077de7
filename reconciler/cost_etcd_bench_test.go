package reconciler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// The benchmarks of this file are BenchmarkSeededNoChangeCommit and
// BenchmarkSeededOneChange on the etcd engine: the same seeded fleet of
// -fleet tenants, its records in a real etcd of three members in the
// benchmark's process (internal/etcdtest), as several replicas share it.
// The cpu-ms/op metric counts the process, so the three members' work
// too; run them beside the bbolt ones with
// -test.bench 'SeededNoChangeCommit|SeededOneChange'.

// seedEtcd is seed on the etcd engine.
func seedEtcd(b *testing.B, debounce time.Duration) *seeded {
	b.Helper()
	cli := etcdtest.Start(b, 3).Client(b)
	st, err := etcdstore.Open(context.Background(), etcdstore.Config{Client: cli, Prefix: "/rezuscloud/"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return seedInto(b, st, filepath.Join(b.TempDir(), "data"), debounce, 1, nil)
}

// BenchmarkSeededNoChangeCommitEtcd is BenchmarkSeededNoChangeCommit on
// the etcd engine.
func BenchmarkSeededNoChangeCommitEtcd(b *testing.B) {
	s := seedEtcd(b, 0)
	i := 0
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		i++
		if err := os.WriteFile(filepath.Join(s.work.Dir(), "README.md"), fmt.Appendf(nil, "round %d\n", i), 0o644); err != nil {
			b.Fatal(err)
		}
		s.commit(fmt.Sprintf("readme %d", i))
		start := time.Now()
		c, err := s.rec.Reconcile(context.Background(), s.fetch())
		if err != nil || c.Status.Phase != schema.CommitSucceeded || len(c.Status.Tenants) != *seedFleet {
			b.Fatalf("%v: %s with %d results", err, c.Status.Phase, len(c.Status.Tenants))
		}
		b.Logf("op %d: %.1f ms", i, float64(time.Since(start).Microseconds())/1e3)
	}
	s.checkQuiet()
	b.ReportMetric(float64(*seedFleet), "tenants")
}

// BenchmarkSeededOneChangeEtcd is BenchmarkSeededOneChange on the etcd
// engine: one changed tenant, from the fetch to the decision.
func BenchmarkSeededOneChangeEtcd(b *testing.B) {
	s := seedEtcd(b, time.Hour)
	desired, err := schema.Load(s.fetch().FS, ".", &schema.Options{Cache: s.rec.manifests})
	if err != nil || len(render.ValidateTalos(desired.Tenants[0])) > 0 {
		b.Fatalf("t0000 does not validate: %v", err)
	}
	i := 0
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		i++
		seededTenant(b, s.work.Dir(), 42, 2+i%2)
		s.commit(fmt.Sprintf("scale t0042 %d", i))
		wall, cpu := time.Now(), cpuTime()
		c := s.rec.Submit(s.fetch()).Commit()
		b.Logf("op %d, fetch to decision: %.1f ms wall, %.1f cpu-ms", i, float64(time.Since(wall).Microseconds())/1e3, float64((cpuTime()-cpu).Microseconds())/1e3)
		var pending []string
		for _, res := range c.Status.Tenants {
			if res.Phase != schema.CommitSucceeded {
				pending = append(pending, res.Tenant)
			}
		}
		if len(pending) != 1 || pending[0] != "t0042" {
			b.Fatalf("commit %s: tenants not done: %v, want only t0042", c.Status.Phase, pending)
		}
	}
	s.checkQuiet()
}
