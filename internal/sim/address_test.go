package sim

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAllocateLowestFree(t *testing.T) {
	taken := map[netip.Addr]bool{}
	a, err := Allocate(taken)
	if err != nil || a != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("empty set: got %v, %v; want 192.0.2.1", a, err)
	}
	for _, s := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.4"} {
		taken[netip.MustParseAddr(s)] = true
	}
	if a, _ := Allocate(taken); a != netip.MustParseAddr("192.0.2.3") {
		t.Fatalf("hole at .3: got %v", a)
	}
}

func TestAllocateCrossesRangesSkippingNetworkAndBroadcast(t *testing.T) {
	taken := map[netip.Addr]bool{}
	var got []netip.Addr
	for range Capacity {
		a, err := Allocate(taken)
		if err != nil {
			t.Fatalf("after %d: %v", len(got), err)
		}
		if taken[a] {
			t.Fatalf("allocated %v twice", a)
		}
		if !Allocatable(a) {
			t.Fatalf("allocated %v outside the ranges", a)
		}
		taken[a] = true
		got = append(got, a)
	}
	want := map[int]string{
		0: "192.0.2.1", 253: "192.0.2.254",
		254: "198.51.100.1", 507: "198.51.100.254",
		508: "203.0.113.1", 761: "203.0.113.254",
	}
	for i, w := range want {
		if got[i].String() != w {
			t.Errorf("allocation %d = %v, want %s", i, got[i], w)
		}
	}
	_, err := Allocate(taken)
	if err == nil || !strings.Contains(err.Error(), "no free address") || !strings.Contains(err.Error(), "762") {
		t.Fatalf("full ranges: err = %v", err)
	}
	// Freeing one address in the middle hands exactly that one out again.
	delete(taken, netip.MustParseAddr("198.51.100.77"))
	if a, _ := Allocate(taken); a.String() != "198.51.100.77" {
		t.Fatalf("after freeing 198.51.100.77: got %v", a)
	}
}

func TestAllocatable(t *testing.T) {
	for s, want := range map[string]bool{
		"192.0.2.0": false, "192.0.2.1": true, "192.0.2.254": true, "192.0.2.255": false,
		"198.51.100.9": true, "203.0.113.200": true,
		"10.0.0.1": false, "192.0.3.1": false, "2001:db8::1": false,
	} {
		if got := Allocatable(netip.MustParseAddr(s)); got != want {
			t.Errorf("Allocatable(%s) = %v, want %v", s, got, want)
		}
	}
}
