package talos

import (
	"context"
	"testing"
	"time"
)

// TestProbeSlotsFollowHowProbesFare: a slow probe halves the slots at
// once, even with none in flight, down to minProbeSlots, and the other
// slow probes that began before it change nothing; each run of as many
// probes on time as there are slots adds one back, up to the most; and
// the slots that can be taken are always the limit.
func TestProbeSlotsFollowHowProbesFare(t *testing.T) {
	s := newProbeSlots(32)
	acquire := func() int {
		t.Helper()
		epoch, err := s.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return epoch
	}
	takes := func(want int, when string) {
		t.Helper()
		epochs := make([]int, want)
		for i := range want {
			epochs[i] = acquire()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := s.acquire(ctx); err == nil {
			t.Fatalf("%s: a slot past the %d of the limit", when, want)
		}
		for _, e := range epochs {
			s.release(e, false) // on time, counted below
		}
	}
	takes(32, "at first")

	// 32 in flight, of which two are slow: the second began before the
	// first halved the slots. The others end on time.
	epochs := make([]int, 32)
	for i := range epochs {
		epochs[i] = acquire()
	}
	if change, n := s.release(epochs[0], true); change != slotsHalved || n != 16 {
		t.Fatalf("a slow probe: change %d to %d slots, want halved to 16", change, n)
	}
	if change, n := s.release(epochs[1], true); change != slotsKept || n != 16 {
		t.Fatalf("a slow probe begun before the halving: change %d to %d slots, want none at 16", change, n)
	}
	for _, e := range epochs[2:] {
		s.release(e, false)
	}
	if n := s.slots(); n != 17 {
		t.Fatalf("after two slow probes begun together and 30 on time: %d slots, want 16 and one back", n)
	}
	takes(17, "after a slow probe")
	if n := s.slots(); n != 18 {
		t.Fatalf("after 17 more on time: %d slots, want 18", n)
	}

	// Slow probes one after another, with none other in flight: each
	// halves the slots at once, never below minProbeSlots.
	for range 5 {
		s.release(acquire(), true)
	}
	if n := s.slots(); n != minProbeSlots {
		t.Fatalf("after five slow probes: %d slots, want %d", n, minProbeSlots)
	}
	takes(minProbeSlots, "at the fewest")

	// Back up to the most, and no further, told once.
	full := 0
	for range 2000 {
		if change, n := s.release(acquire(), false); change == slotsFull {
			full++
			if n != 32 {
				t.Fatalf("back to full at %d slots, want 32", n)
			}
		}
	}
	if n := s.slots(); n != 32 || full != 1 {
		t.Fatalf("after many on time: %d slots, told full %d times; want 32, once", n, full)
	}
	takes(32, "back at the most")

	few := newProbeSlots(2)
	epoch, err := few.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if change, _ := few.release(epoch, true); change != slotsKept {
		t.Fatalf("a prober of 2 slots after a slow probe: change %d, want none", change)
	}
	if n := few.slots(); n != 2 {
		t.Fatalf("a prober of 2 slots after a slow probe: %d, want 2", n)
	}
}
