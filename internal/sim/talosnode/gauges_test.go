package talosnode

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/emptypb"
)

// TestGauges: LoadAvg and Memory answer through the machinery client
// with values that fit the machine (load within its threads, MemTotal
// from its memory, MemAvailable below it), the same at the same time,
// and moving with time.
func TestGauges(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 12)
	hw := VMHardware(4, 8<<10, 40)
	if err := h.BootMachine(Machine{ID: "vm-gauges", Address: a, UserData: machineConfig(t, secrets, "controlplane", false), Hardware: &hw}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	la, err := c.MachineClient.LoadAvg(ctx, &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if l := la.Messages[0]; l.Load1 <= 0 || l.Load5 <= 0 || l.Load15 <= 0 || l.Load1 > 8 || l.Load15 > 8 {
		t.Errorf("load average of a 4-thread machine: %v", l)
	}
	mem, err := c.Memory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := mem.Messages[0].Meminfo; m.Memtotal != 8<<20*98/100 || m.Memavailable == 0 || m.Memavailable >= m.Memtotal || m.Memfree > m.Memavailable {
		t.Errorf("memory of an 8 GiB machine: %v", m)
	}

	h.mu.Lock()
	n := h.byID["vm-gauges"]
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	a1, b1, c1 := loadAvg(n, t0)
	a2, b2, c2 := loadAvg(n, t0)
	a3, _, _ := loadAvg(n, t0.Add(3*time.Minute))
	m1, m2 := memInfo(n, t0), memInfo(n, t0.Add(90*time.Minute))
	h.mu.Unlock()
	if a1 != a2 || b1 != b2 || c1 != c2 {
		t.Errorf("the load at one time: %v %v %v, then %v %v %v", a1, b1, c1, a2, b2, c2)
	}
	if a1 == a3 || m1.Memavailable == m2.Memavailable {
		t.Errorf("the gauges do not move with time: load %v, %v; available %d, %d", a1, a3, m1.Memavailable, m2.Memavailable)
	}
}
