package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

type runtimeMem struct{ totalAlloc uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.totalAlloc = s.TotalAlloc
}

// genTree generates n tenants, each a directory with one Tenant, two
// NodeGroups and seven ConfigPatches: ten documents in three files.
func genTree(n int) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := range n {
		name := fmt.Sprintf("t%03d", i)
		fsys[name+"/tenant.yaml"] = &fstest.MapFile{Mode: 0o644, Data: fmt.Appendf(nil, `# yaml-language-server: $schema=../schema/tenant.schema.json
apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: %[1]s
  labels: {team: team-%[2]d}
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://%[1]s.example.internal:6443
  podNetwork: [10.244.0.0/16]
  serviceNetwork: [10.96.0.0/12]
  plugins:
    cni: {type: flannel}
  configPatches:
    - name: cluster-name
      patch: |
        cluster:
          clusterName: %[1]s
`, name, i%7)}
		groups := ""
		for _, g := range []struct{ name, role string }{{"controlplane", "controlplane"}, {"workers", "worker"}} {
			groups += fmt.Sprintf(`---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: %s
  labels:
    rezuscloud.io/tenant: %s
    rezuscloud.io/role: %s
spec:
  count: %d
  providerClass: sim
  providerConfig:
    shape: small
`, g.name, name, g.role, 1+i%3)
		}
		fsys[name+"/nodegroups.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(groups)}
		patches := ""
		for p := range 7 {
			target := ""
			if p%3 == 1 {
				target = "  targetRole: worker\n"
			}
			patches += fmt.Sprintf(`---
apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: patch-%d
  labels:
    rezuscloud.io/tenant: %s
spec:
%s  patch: |
    machine:
      sysctls:
        net.core.somaxconn: "%d"
`, p, name, target, 1024+p)
		}
		fsys[name+"/patches.yaml"] = &fstest.MapFile{Mode: 0o644, Data: []byte(patches)}
	}
	return fsys
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
