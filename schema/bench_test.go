package schema

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
)

type runtimeMem struct{ totalAlloc uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.totalAlloc = s.TotalAlloc
}

// genTree generates n tenants (t000, t001, …), each a directory with one
// Tenant, two NodeGroups and seven ConfigPatches: ten documents in three
// files.
func genTree(n int) fstest.MapFS { return genFleet(n, manifestfleet.FilePerKind) }

// genFleet generates the fleet of genTree in layout. Tenant i has 1+i%3
// machines in each node group and its name in a patch of its own, and
// every third ConfigPatch from the second on targets its workers.
func genFleet(n int, layout manifestfleet.Layout) fstest.MapFS {
	return manifestfleet.Options{Tenants: n, Digits: 3, Dir: ".", Layout: layout, Patches: 7, SchemaComment: true,
		Edit: func(t *manifestfleet.Tenant) {
			t.Groups[0].Count, t.Groups[1].Count = 1+t.Index%3, 1+t.Index%3
			t.Patches = []manifestfleet.Patch{{Name: "cluster-name", Text: "cluster:\n  clusterName: " + t.Name + "\n"}}
			for p := 1; p < len(t.ConfigPatches); p += 3 {
				t.ConfigPatches[p].TargetRole = RoleWorker
			}
		}}.MapFS()
}

// BenchmarkLoad10k loads and validates 10,000 manifests: 1,000 tenants, each
// with two node groups and seven config patches, from memory.
func BenchmarkLoad10k(b *testing.B) {
	fsys := genTree(1000)
	for b.Loop() {
		d, err := Load(fsys, ".", nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Tenants) != 1000 || len(d.Tenants[999].Patches) != 7 || len(d.Tenants[0].NodeGroups) != 2 {
			b.Fatalf("wrong desired state: %d tenants", len(d.Tenants))
		}
	}
}

// BenchmarkLoad10kDisk loads the same tree from a directory on disk.
func BenchmarkLoad10kDisk(b *testing.B) {
	dir := b.TempDir()
	for name, f := range genTree(1000) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	fsys := os.DirFS(dir)
	for b.Loop() {
		d, err := Load(fsys, ".", nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Tenants) != 1000 {
			b.Fatalf("%d tenants", len(d.Tenants))
		}
	}
}

// BenchmarkAliasBomb measures how fast a "billion laughs" document is refused.
func BenchmarkAliasBomb(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "bad", "alias-bomb", "tenant.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	fsys := fstest.MapFS{"bomb.yaml": {Data: data}}
	for b.Loop() {
		if _, err := Load(fsys, ".", nil); err == nil {
			b.Fatal("the bomb was accepted")
		}
	}
}

// BenchmarkLoad20k loads and validates 20,000 manifests (2,000 tenants as
// in BenchmarkLoad10k) from memory into an empty Cache, as a server's first
// load does. heap-MiB is the heap in use, after a collection, with the
// desired state and the cache held; cpu-ms/op counts every core's work
// (on shared cores the wall time also counts the waits for one).
func BenchmarkLoad20k(b *testing.B) {
	fsys := genTree(2000)
	var heap uint64
	var cpu time.Duration
	for b.Loop() {
		start := cpuTime()
		cache := NewCache(0)
		d, err := Load(fsys, ".", &Options{Cache: cache})
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Tenants) != 2000 || len(d.Tenants[1999].Patches) != 7 {
			b.Fatalf("wrong desired state: %d tenants", len(d.Tenants))
		}
		cpu += cpuTime() - start
		b.StopTimer()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		heap = max(heap, m.HeapAlloc)
		runtime.KeepAlive(d)
		runtime.KeepAlive(cache)
		b.StartTimer()
	}
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
