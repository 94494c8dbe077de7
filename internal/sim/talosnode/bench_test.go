package talosnode

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/render/talos"
)

// benchNodes is how many idle nodes the benchmarks start:
// REZUSCLOUD_SIM_NODES, default 8000.
func benchNodes() int {
	if n, err := strconv.Atoi(os.Getenv("REZUSCLOUD_SIM_NODES")); err == nil && n > 0 {
		return n
	}
	return 8000
}

// rssKiB is the process's resident set size.
func rssKiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func openFDs() int {
	es, _ := os.ReadDir("/proc/self/fd")
	return len(es)
}

type idleFleet struct {
	h     *Host
	addrs []string
	cp    []byte // bundle
}

var (
	fleetOnce sync.Once
	fleet     *idleFleet
)

// startFleet boots benchNodes nodes (one control plane in ten) in one
// host, once per benchmark binary, and reports what that cost.
func startFleet(b *testing.B) *idleFleet {
	fleetOnce.Do(func() {
		// 100 clusters of 80 machines (8 control planes) share one CA:
		// each has its own cluster id and secret.
		secrets := bundle(b, "a")
		var cps, ws [][]byte
		for c := range 100 {
			own := clusterSecrets(b, secrets, c)
			cps = append(cps, machineConfig(b, own, "controlplane", false))
			ws = append(ws, machineConfig(b, own, "worker", false))
		}
		dir, err := os.MkdirTemp("", "talosnode-bench-")
		if err != nil {
			b.Fatal(err)
		}
		h, err := Open(Options{Dir: dir, Timings: Timings{Boot: 100 * time.Millisecond}})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		rss0, g0, fd0 := rssKiB(), runtime.NumGoroutine(), openFDs()
		n := benchNodes()
		f := &idleFleet{h: h, cp: secrets}
		start := time.Now()
		for i := range n {
			a := netip.AddrFrom4([4]byte{127, byte(h.Block()), byte(i / 254), byte(i%254 + 1)}).String()
			cfg := ws[i/80%100]
			if i%10 == 0 {
				cfg = cps[i/80%100]
			}
			if err := h.Boot(fmt.Sprintf("vm-%05d", i), a, cfg); err != nil {
				b.Fatal(err)
			}
			f.addrs = append(f.addrs, a)
		}
		took := time.Since(start)
		time.Sleep(200 * time.Millisecond) // every node booted
		runtime.GC()
		rss, g, fd := rssKiB(), runtime.NumGoroutine(), openFDs()
		b.Logf("%d idle nodes: started in %s (%.0f µs/node); RSS +%d MiB (%.1f KiB/node); goroutines %d → %d; fds %d → %d (%.2f/node)",
			n, took.Round(time.Millisecond), float64(took.Microseconds())/float64(n), (rss-rss0)/1024, float64(rss-rss0)/float64(n),
			g0, g, fd0, fd, float64(fd-fd0)/float64(n))
		fleet = f
	})
	return fleet
}

// clusterSecrets returns secrets with the cluster id and secret of cluster
// c: the certificates stay shared, the cluster is its own (the bundle owns
// these fields, so no patch may set them).
func clusterSecrets(b *testing.B, secrets []byte, c int) []byte {
	bundle, err := talos.ParseSecrets(secrets)
	if err != nil {
		b.Fatal(err)
	}
	bundle.Cluster.ID, bundle.Cluster.Secret = clusterValue("id", c), clusterValue("secret", c)
	out, err := yaml.Marshal(bundle)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// clusterValue is a cluster id or secret: 32 bytes, base64.
func clusterValue(what string, c int) string {
	return base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%-32s", fmt.Sprintf("%s-%d", what, c))))
}

// BenchmarkIdleNodes starts benchNodes idle nodes and then measures
// nothing but an idle second of the host: the figures are in the log.
func BenchmarkIdleNodes(b *testing.B) {
	f := startFleet(b)
	for b.Loop() {
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportMetric(float64(len(f.h.Nodes())), "nodes")
}

// BenchmarkProbe is one probe of the Talos plane, Version and
// MachineStatus, over a kept connection, across the first 2000 nodes of
// the fleet (a client per node; more would pass the fd limit with both
// ends in one process).
func BenchmarkProbe(b *testing.B) {
	f := startFleet(b)
	k := min(2000, len(f.addrs))
	clients := make([]*client.Client, k)
	var mu sync.Mutex
	get := func(i int) *client.Client {
		mu.Lock()
		defer mu.Unlock()
		if clients[i] == nil {
			clients[i] = adminClient(b, f.cp, f.addrs[i])
		}
		return clients[i]
	}
	ctx := context.Background()
	for i := range k { // connect first: the benchmark is the probe, not the handshake
		if _, err := get(i).Version(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c := get(int(next.Add(1)) % k)
			if _, err := c.Version(ctx); err != nil {
				b.Error(err)
				return
			}
			if _, err := machineStatus(ctx, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/probe")
	runtime.GC()
	b.Logf("RSS with %d clients connected: %d MiB", k, rssKiB()/1024)
}

// BenchmarkReadConfig reads the running config over COSI and parses it,
// as the Talos plane's observer does when a machine's config changed
// (an unchanged one is only hashed), over kept connections across the
// first 2000 nodes of the fleet; cpu-µs/read is both ends, the client's
// parse of the config included.
func BenchmarkReadConfig(b *testing.B) {
	f := startFleet(b)
	k := min(2000, len(f.addrs))
	clients := make([]*client.Client, k)
	ctx := context.Background()
	for i := range k {
		clients[i] = adminClient(b, f.cp, f.addrs[i])
		if _, err := clients[i].Version(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		mc, err := safe.StateGet[*config.MachineConfig](ctx, clients[i%k].COSI, config.NewMachineConfig(nil).Metadata())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := mc.Provider().Bytes(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/read")
}

// BenchmarkProbeNewConnection is a probe that dials first: TLS handshake,
// Version, MachineStatus, close.
func BenchmarkProbeNewConnection(b *testing.B) {
	f := startFleet(b)
	ctx := context.Background()
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c := adminClient(b, f.cp, f.addrs[int(next.Add(1))%len(f.addrs)])
			if _, err := c.Version(ctx); err != nil {
				b.Error(err)
				return
			}
			if _, err := machineStatus(ctx, c); err != nil {
				b.Error(err)
				return
			}
			c.Close()
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "probes/s")
}

// BenchmarkOpenSimDir opens the host on an existing sim dir, such as the
// one bench/reconcile keeps (REZUSCLOUD_SIM_DIR=DIR/sim), and reports
// what serving its machines costs the process once they have booted: the
// Go heap in use, the RSS, goroutines and descriptors. The machines have
// their tenants' real Talos configs, one per node group. Without
// REZUSCLOUD_SIM_DIR it is skipped.
func BenchmarkOpenSimDir(b *testing.B) {
	dir := os.Getenv("REZUSCLOUD_SIM_DIR")
	if dir == "" {
		b.Skip("REZUSCLOUD_SIM_DIR is not set")
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0, rss0, g0, fd0 := ms.HeapInuse, rssKiB(), runtime.NumGoroutine(), openFDs()
	start, cpu0 := time.Now(), cpuTime()
	h, err := Open(Options{Dir: dir, Timings: Timings{Boot: 100 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	opened, openCPU := time.Since(start), cpuTime()-cpu0
	time.Sleep(2 * time.Second) // every node booted
	for b.Loop() {
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	n := len(h.Nodes())
	heap := float64(ms.HeapInuse-heap0) / (1 << 20)
	b.ReportMetric(float64(n), "nodes")
	b.ReportMetric(float64(opened.Microseconds())/1000, "open-ms")
	b.ReportMetric(float64(openCPU.Microseconds())/1000, "open-cpu-ms")
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(heap*1024/float64(max(n, 1)), "heap-KiB/node")
	b.Logf("%d nodes of %s: opened in %v; heap in use +%.1f MiB, RSS +%d MiB, goroutines %d → %d, fds %d → %d",
		n, dir, opened.Round(time.Millisecond), heap, (rssKiB()-rss0)/1024, g0, runtime.NumGoroutine(), fd0, openFDs())
}

// BenchmarkInventory is a read of every inventory kind of one node, on
// the server's side (what a COSI List of each builds), across the fleet;
// it reports what the inventory keeps per node once every node was read
// (the resource versions), in bytes of live heap.
func BenchmarkInventory(b *testing.B) {
	f := startFleet(b)
	var invKinds []servedKind
	for _, k := range servedKinds() {
		switch k.def.TypedSpec().DefaultNamespace {
		case "hardware", "network":
			invKinds = append(invKinds, k)
		}
	}
	for _, typ := range []string{"Disks.block.talos.dev", "SystemDisks.block.talos.dev", "ExtensionStatuses.runtime.talos.dev"} {
		invKinds = append(invKinds, servedKinds()[typ])
	}
	f.h.mu.Lock()
	nodes := make([]*node, 0, len(f.h.byID))
	for _, n := range f.h.byID {
		nodes = append(nodes, n)
	}
	f.h.mu.Unlock()
	read := func(n *node) {
		for _, k := range invKinds {
			if _, err := k.list(f.h, &call{n: n}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	for _, n := range nodes {
		read(n)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	perNode := float64(int64(ms.HeapAlloc)-int64(heap0)) / float64(len(nodes))
	i := 0
	b.ResetTimer()
	for b.Loop() {
		read(nodes[i%len(nodes)])
		i++
	}
	b.ReportMetric(perNode, "heap-B/node")
	b.ReportMetric(float64(len(invKinds)), "kinds")
}
