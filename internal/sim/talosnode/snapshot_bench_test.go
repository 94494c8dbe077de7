package talosnode

import (
	"io"
	"runtime"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// BenchmarkEtcdSnapshot streams a 256 MiB snapshot of a simulated etcd
// (SetEtcdFiller) from a node to a machinery client over loopback TLS,
// and reports its throughput, the CPU time of both ends, and how far the
// heap grew: the filler is generated as it streams, never held.
func BenchmarkEtcdSnapshot(b *testing.B) {
	const size = 256 << 20
	h := openHost(b, "")
	secrets := bundle(b, "a")
	cfg := machineConfig(b, secrets, "controlplane", false)
	if err := h.Boot("vm-0", addr(h, 20), cfg); err != nil {
		b.Fatal(err)
	}
	waitRunning(b, h, "vm-0")
	cl := adminClient(b, secrets, addr(h, 20))
	if err := cl.Bootstrap(ctxT(b), &machine.BootstrapRequest{}); err != nil {
		b.Fatal(err)
	}
	if err := h.SetEtcdFiller("vm-0", size); err != nil {
		b.Fatal(err)
	}
	var before, peak runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.SetBytes(size)
	cpu := cpuTime()
	b.ResetTimer()
	for range b.N {
		rc, err := cl.EtcdSnapshot(ctxT(b), &machine.EtcdSnapshotRequest{})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n < size {
			b.Fatalf("snapshot: %d bytes, %v", n, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
	runtime.ReadMemStats(&peak)
	b.ReportMetric(float64(int64(peak.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heap-growth-MiB")
}
