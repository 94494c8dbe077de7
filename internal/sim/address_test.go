package sim

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestAllocateLowestFree(t *testing.T) {
	b := Block(42)
	taken := map[netip.Addr]bool{}
	a, err := b.Allocate(taken)
	if err != nil || a != netip.MustParseAddr("127.42.0.1") {
		t.Fatalf("empty set: got %v, %v; want 127.42.0.1", a, err)
	}
	for _, s := range []string{"127.42.0.1", "127.42.0.2", "127.42.0.4"} {
		taken[netip.MustParseAddr(s)] = true
	}
	if a, _ := b.Allocate(taken); a != netip.MustParseAddr("127.42.0.3") {
		t.Fatalf("hole at .3: got %v", a)
	}
}

func TestAllocateFillsTheBlock(t *testing.T) {
	b := Block(7)
	// Allocation order is address order: each allocation takes the lowest
	// free address, so the first ones cross from 127.7.0.254 to 127.7.1.1.
	taken := map[netip.Addr]bool{}
	for i := range 300 {
		a, err := b.Allocate(taken)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]string{0: "127.7.0.1", 253: "127.7.0.254", 254: "127.7.1.1"}[i]; want != "" && a.String() != want {
			t.Errorf("allocation %d = %v, want %s", i, a, want)
		}
		taken[a] = true
	}
	// Every machine address of the block, in order.
	var all []netip.Addr
	for a := b.Prefix().Addr(); b.Prefix().Contains(a); a = a.Next() {
		if b.Contains(a) {
			if !Loopback(a) {
				t.Fatalf("%v is not loopback", a)
			}
			all = append(all, a)
		}
	}
	if len(all) != Capacity || Capacity < 60000 {
		t.Fatalf("%d addresses, Capacity %d; want equal and at least 60000", len(all), Capacity)
	}
	if last := all[len(all)-1].String(); last != "127.7.255.253" {
		t.Fatalf("last address %s", last)
	}
	for _, a := range all {
		taken[a] = true
	}
	_, err := b.Allocate(taken)
	if err == nil || !strings.Contains(err.Error(), "no free address") || !strings.Contains(err.Error(), "127.7.0.0/16") {
		t.Fatalf("full block: err = %v", err)
	}
	// Freeing one address in the middle hands exactly that one out again.
	delete(taken, netip.MustParseAddr("127.7.99.77"))
	if a, _ := b.Allocate(taken); a.String() != "127.7.99.77" {
		t.Fatalf("after freeing 127.7.99.77: got %v", a)
	}
}

func TestBlockContains(t *testing.T) {
	b := Block(9)
	for s, want := range map[string]bool{
		"127.9.0.0": false, "127.9.0.1": true, "127.9.3.254": true, "127.9.3.255": false,
		"127.9.255.254": false, // the claim address
		"127.10.0.1":    false, "127.0.0.1": false, "10.0.0.1": false, "::1": false,
		// documentation ranges of earlier versions are never handed out
		"192.0.2.1": false, "198.51.100.1": false, "203.0.113.1": false,
	} {
		if got := b.Contains(netip.MustParseAddr(s)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", s, got, want)
		}
	}
	for _, bad := range []Block{0, 255} {
		if bad.Valid() {
			t.Errorf("block %d valid", bad)
		}
		if _, err := bad.Allocate(nil); err == nil {
			t.Errorf("block %d allocated", bad)
		}
	}
}

func TestLoopback(t *testing.T) {
	for s, want := range map[string]bool{
		"127.1.0.1": true, "127.254.9.9": true, "127.0.0.1": false, "10.1.2.3": false,
		"192.0.2.1": false, "::1": false,
	} {
		if got := Loopback(netip.MustParseAddr(s)); got != want {
			t.Errorf("Loopback(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestClaimExcludesOtherHolders(t *testing.T) {
	l, err := freeBlock(0)
	if err != nil {
		t.Fatal(err)
	}
	held, err := l.Claim()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := l.Claim(); !errors.Is(err, ErrBlockInUse) {
		t.Fatalf("second claim of %s: %v, want ErrBlockInUse", l, err)
	}
	// A held block is never picked for a new cloud.
	for range 200 {
		b, err := freeBlock(0)
		if err != nil {
			t.Fatal(err)
		}
		if b == l {
			t.Fatalf("freeBlock picked the held block %s", l)
		}
	}
}

// WaitGone returns once nothing answers at a machine's Talos port: at
// once when nothing listens, else when the listener closes, and after
// max at the latest.
func TestWaitGone(t *testing.T) {
	b, err := freeBlock(0)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := b.Claim() // the block stays this test's while it runs
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Close()
	addr := netip.AddrFrom4([4]byte{127, byte(b), 7, 7})
	ctx := context.Background()
	start := time.Now()
	WaitGone(ctx, addr.String(), 5*time.Second)
	if d := time.Since(start); d > time.Second {
		t.Errorf("with nothing listening, WaitGone took %v", d)
	}

	closing, err := net.Listen("tcp", netip.AddrPortFrom(addr, TalosPort).String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	time.AfterFunc(300*time.Millisecond, func() { closing.Close() })
	start = time.Now()
	WaitGone(ctx, addr.String(), 5*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Errorf("WaitGone returned %v after it began, want once the listener closed, about 300ms", d)
	}

	open, err := net.Listen("tcp", netip.AddrPortFrom(addr, TalosPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	start = time.Now()
	WaitGone(ctx, addr.String(), 200*time.Millisecond)
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("with the listener open, WaitGone gave up after %v, want 200ms", d)
	}
}
