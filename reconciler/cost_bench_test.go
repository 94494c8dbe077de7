package reconciler

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// The benchmarks of this file measure what a commit costs the reconciler
// beside tofu, on a fleet of -fleet tenants of ten manifest files each
// (a Tenant, two NodeGroups and seven ConfigPatches, one document per
// file: 1,000 tenants are 10,000 manifests) in a real git repository read
// through sources.Git. The fleet is seeded as applied: each tenant's
// records are written by finishTenant, as after a successful apply, without
// running tofu, so that the fleet can be large. Every op checks that no
// tofu runs and no tenant record is written where none may be.
var seedFleet = flag.Int("fleet", 1000, "tenants of the seeded fleet of the reconciler's benchmarks (ten manifests each)")

// seeded is a reconciler on a store whose fleet is applied, and the git
// repository and source of its manifests.
type seeded struct {
	b       *testing.B
	dataDir string
	rec     *Reconciler
	store   store.Store
	work    *gittest.Workdir
	src     *sources.Git
	writes  *storeWrites
}

// seededTenant writes the ten manifest files of tenant i, with workers
// workers, under dir.
func seededTenant(b *testing.B, dir string, i, workers int) {
	fleet := manifestfleet.TenFiles(*seedFleet)
	fleet.Workers = workers
	if err := fleet.WriteTenant(dir, i); err != nil {
		b.Fatal(err)
	}
}

// newBenchReconciler opens a reconciler on store, with the tofu runner of
// the tests and queue's debounce: an hour holds changed tenants back, so
// that a benchmark measures a commit up to its decision and no tofu runs.
func newBenchReconciler(b *testing.B, st store.Store, dataDir string, debounce time.Duration) *Reconciler {
	runner, err := tofu.NewRunner(tofu.Options{Binary: testenv.Tofu(b)})
	if err != nil {
		b.Fatal(err)
	}
	rec, err := New(st, runner, render.Builtin(), Options{DataDir: dataDir, StateURL: "http://127.0.0.1:1", Debounce: debounce})
	if err != nil {
		b.Fatal(err)
	}
	return rec
}

// seed builds the fleet, applied, and a reconciler with debounce.
func seed(b *testing.B, debounce time.Duration) *seeded {
	b.Helper()
	return seedWith(b, debounce, 1, nil)
}

// seedWith is seed with workers machines in each tenant's worker group,
// and each tenant's Machines, as its apply would have projected them from
// its state, from machines (none when machines is nil).
func seedWith(b *testing.B, debounce time.Duration, workers int, machines func(*schema.TenantDesired) []*schema.Machine) *seeded {
	b.Helper()
	dataDir := filepath.Join(b.TempDir(), "data")
	st, err := bolt.Open(dataDir, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return seedInto(b, st, dataDir, debounce, workers, machines)
}

// seedInto is seedWith on the store st, with dataDir for the rest.
func seedInto(b *testing.B, st store.Store, dataDir string, debounce time.Duration, workers int, machines func(*schema.TenantDesired) []*schema.Machine) *seeded {
	b.Helper()
	s := &seeded{b: b, dataDir: dataDir, store: st, work: gittest.NewWorkdir(b, "")}
	for i := range *seedFleet {
		seededTenant(b, s.work.Dir(), i, workers)
	}
	s.work.Commit("the fleet")
	var err error
	s.src, err = sources.NewGit(sources.GitOptions{URL: s.work.Dir(), Dir: dataDir})
	if err != nil {
		b.Fatal(err)
	}
	s.rec = newBenchReconciler(b, st, dataDir, debounce)
	b.Cleanup(func() { s.rec.Close() })
	snap := s.fetch()
	desired, err := schema.Load(snap.FS, ".", &schema.Options{Cache: s.rec.manifests})
	if err != nil {
		b.Fatalf("the fleet is invalid: %v", err)
	}
	hashes := s.rec.inputs.of(desired, nil)
	for _, td := range desired.Tenants {
		rec := &appliedRecord{Tenant: td.Tenant.Metadata.Name, Revision: snap.Revision, Generation: 1,
			InputHash: hashes[td.Tenant.Metadata.Name], Annotations: td.Tenant.Metadata.Annotations,
			Model: modeldiff.AppliedModel(td.Tenant, td.NodeGroups, td.Patches, nil)}
		var ms []*schema.Machine
		if machines != nil {
			ms = machines(td)
		}
		if err := s.rec.finishTenant(td, rec, ms, false); err != nil {
			b.Fatal(err)
		}
		// A work directory, as an apply leaves it, for Recover to look at.
		if _, err := s.rec.workDir(rec.Tenant); err != nil {
			b.Fatal(err)
		}
	}
	s.writes = countWrites(st)
	// The garbage of seeding is no part of what a commit costs.
	runtime.GC()
	return s
}

// fetch fetches the repository's head.
func (s *seeded) fetch() sources.Snapshot {
	snap, _, err := s.src.Fetch(context.Background())
	if err != nil {
		s.b.Fatal(err)
	}
	return snap
}

// commit commits what is in the work tree, outside the timer.
func (s *seeded) commit(msg string) {
	s.b.StopTimer()
	s.work.Commit(msg)
	s.b.StartTimer()
}

// checkQuiet fails the benchmark when tofu ran or a tenant record other
// than those of the tenants named was written.
func (s *seeded) checkQuiet(changed ...string) {
	if n := s.rec.Runner().Runs(); n != 0 {
		s.b.Fatalf("%d tofu runs", n)
	}
	keys := s.writes.reset()
	allowed := map[string]bool{}
	for _, c := range changed {
		allowed[c] = true
	}
	for _, kind := range tenantKinds {
		for _, key := range keys[kind] {
			if !allowed[key] {
				s.b.Fatalf("%s %s was written", kind, key)
			}
		}
	}
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per op since start: on a machine whose
// cores are shared, the wall time also counts the waits for a core.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkSeededNoChangeCommit: one op fetches a new commit that changes
// only a README and reconciles it to the end.
func BenchmarkSeededNoChangeCommit(b *testing.B) {
	s := seed(b, 0)
	i := 0
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		i++
		if err := os.WriteFile(filepath.Join(s.work.Dir(), "README.md"), fmt.Appendf(nil, "round %d\n", i), 0o644); err != nil {
			b.Fatal(err)
		}
		s.commit(fmt.Sprintf("readme %d", i))
		c, err := s.rec.Reconcile(context.Background(), s.fetch())
		if err != nil || c.Status.Phase != schema.CommitSucceeded || len(c.Status.Tenants) != *seedFleet {
			b.Fatalf("%v: %s with %d results", err, c.Status.Phase, len(c.Status.Tenants))
		}
	}
	s.checkQuiet()
	b.ReportMetric(float64(*seedFleet), "tenants")
}

// BenchmarkSeededOneChange: one op fetches a commit that changes one
// manifest of one tenant, and takes the revision to its decision: every
// other tenant done, the changed one queued. With -test.v it logs each
// op's wall and CPU time from the fetch to the decision (the cpu-ms/op
// metric also counts the writing of the changed files).
//
// The Talos validation of a changed tenant makes its secrets bundle once
// per process (RSA keys, a second or two of CPU); that happens before the
// timer, as in a server that has validated a change before.
func BenchmarkSeededOneChange(b *testing.B) {
	s := seed(b, time.Hour)
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
		run := s.rec.Submit(s.fetch())
		c := run.Commit()
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

// BenchmarkFirstLoad: one op fetches the fleet's head into a new clone and
// loads and validates it with an empty manifest cache, as a server's first
// commit does: schema-ms is the part of schema.Load (parse, JSON Schemas,
// checks across files), the rest the provider modules' checks and the
// Talos configs of every tenant, none of them applied yet. heap-MiB is the
// heap in use with the desired state held, live-MiB the same after a
// collection at the end (heap-MiB also counts the validation's garbage).
func BenchmarkFirstLoad(b *testing.B) {
	s := seed(b, 0)
	var peak uint64
	var schemaTime time.Duration
	var held *schema.Desired
	cpu := cpuTime()
	for b.Loop() {
		src, err := sources.NewGit(sources.GitOptions{URL: s.work.Dir(), Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		snap, _, err := src.Fetch(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		s.rec.manifests = schema.NewCache(0)
		start := time.Now()
		if _, err := schema.Load(snap.FS, ".", &schema.Options{Cache: s.rec.manifests}); err != nil {
			b.Fatal(err)
		}
		schemaTime += time.Since(start)
		desired, _, probs := s.rec.load(snap, nil)
		if len(probs) > 0 || len(desired.Tenants) != *seedFleet {
			b.Fatalf("%d problems", len(probs))
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		peak = max(peak, m.HeapInuse)
		held = desired
	}
	reportCPU(b, cpu) // before the collection below
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	runtime.KeepAlive(held)
	b.ReportMetric(float64(peak)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "live-MiB")
	b.ReportMetric(float64(schemaTime.Milliseconds())/float64(b.N), "schema-ms/op")
}

// BenchmarkRestart: one op closes the reconciler and starts a new one on
// the same data dir, recovers, and reconciles the revision the source
// yields first, the one applied.
func BenchmarkRestart(b *testing.B) {
	s := seed(b, 0)
	snapDir := s.dataDir
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		s.rec.Close()
		s.rec = newBenchReconciler(b, s.store, snapDir, 0)
		s.rec.Recover()
		src, err := sources.NewGit(sources.GitOptions{URL: s.work.Dir(), Dir: snapDir})
		if err != nil {
			b.Fatal(err)
		}
		s.src = src
		c, err := s.rec.Reconcile(context.Background(), s.fetch())
		if err != nil || c.Status.Phase != schema.CommitSucceeded {
			b.Fatalf("%v: %s", err, c.Status.Phase)
		}
	}
	s.checkQuiet()
}
