package talosnode

import (
	"context"
	"hash/fnv"
	"math"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The gauges a node serves (LoadAvg, Memory) follow from its id, its
// hardware and the clock: each machine has its own level and phase, and
// the values drift slowly over a day, so that a graph of them looks
// alive and the same clock gives the same values.

// gaugeSeed is a machine's level and phase, from its id: in [0, 1).
func gaugeSeed(id string) (level, phase float64) {
	f := fnv.New64a()
	f.Write([]byte(id))
	s := f.Sum64()
	return float64(s&0xffff) / 0x10000, float64(s>>16&0xffff) / 0x10000
}

// wave is a slow oscillation in [-1, 1] of period p, shifted by phase.
func wave(t time.Time, p time.Duration, phase float64) float64 {
	x := float64(t.UnixNano()%int64(p))/float64(p) + phase
	return math.Sin(2 * math.Pi * x)
}

// loadAvg is n's load average at t: busier on control planes, in
// proportion to its threads, with the 1-minute figure moving fastest.
// Called with h.mu held.
func loadAvg(n *node, t time.Time) (l1, l5, l15 float64) {
	level, phase := gaugeSeed(n.st.ID)
	cpus := float64(max(1, n.inventory().CPUs))
	base := cpus * (0.05 + 0.1*level)
	if n.controlPlane() {
		base += 0.4
	}
	round := func(v float64) float64 { return math.Round(max(0, v)*100) / 100 }
	l15 = round(base * (1 + 0.2*wave(t, 6*time.Hour, phase)))
	l5 = round(base * (1 + 0.2*wave(t, 6*time.Hour, phase) + 0.15*wave(t, 47*time.Minute, phase)))
	l1 = round(base * (1 + 0.2*wave(t, 6*time.Hour, phase) + 0.15*wave(t, 47*time.Minute, phase) + 0.25*wave(t, 7*time.Minute, phase)))
	return l1, l5, l15
}

// memInfo is n's /proc/meminfo at t, in kB: MemTotal is its memory less
// what the kernel keeps, MemAvailable what its work leaves of it.
// Called with h.mu held.
func memInfo(n *node, t time.Time) *machine.MemInfo {
	level, phase := gaugeSeed(n.st.ID)
	total := uint64(n.inventory().MemoryMiB) * 1024 * 98 / 100
	used := 0.2 + 0.15*level + 0.05*wave(t, 3*time.Hour, phase)
	if n.controlPlane() {
		used += 0.15
	}
	avail := uint64(float64(total) * (1 - used))
	return &machine.MemInfo{
		Memtotal: total, Memavailable: avail, Memfree: avail * 6 / 10, Cached: avail * 3 / 10, Buffers: avail / 50,
		Active: (total - avail) * 7 / 10, Inactive: (total - avail) * 3 / 10,
	}
}

// LoadAvg answers the node's load average (see loadAvg).
func (a *machineAPI) LoadAvg(ctx context.Context, _ *emptypb.Empty) (*machine.LoadAvgResponse, error) {
	n := callOf(ctx).n
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	l1, l5, l15 := loadAvg(n, a.h.now())
	return &machine.LoadAvgResponse{Messages: []*machine.LoadAvg{{Metadata: meta(n), Load1: l1, Load5: l5, Load15: l15}}}, nil
}

// Memory answers the node's memory (see memInfo).
func (a *machineAPI) Memory(ctx context.Context, _ *emptypb.Empty) (*machine.MemoryResponse, error) {
	n := callOf(ctx).n
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	return &machine.MemoryResponse{Messages: []*machine.Memory{{Metadata: meta(n), Meminfo: memInfo(n, a.h.now())}}}, nil
}
