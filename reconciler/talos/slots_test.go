package talos

import (
	"context"
	"testing"
	"time"
)

// TestProbeSlotsFollowHowProbesFare: a slow probe halves the slots at
// once, even with none in flight, down to minProbeSlots; each run of as
// many probes on time as there are slots adds one back, up to the
// most; and the slots that can be taken are always the limit.
func TestProbeSlotsFollowHowProbesFare(t *testing.T) {
	s := newProbeSlots(32)
	takes := func(want int, when string) {
		t.Helper()
		for i := range want {
			if err := s.acquire(context.Background()); err != nil {
				t.Fatalf("%s: slot %d of %d: %v", when, i+1, want, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := s.acquire(ctx); err == nil {
			t.Fatalf("%s: a slot past the %d of the limit", when, want)
		}
		for range want {
			s.release(false) // on time, counted below
		}
	}
	takes(32, "at first")

	// A slow probe among 32 in flight: the others end on time.
	for range 32 {
		if err := s.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	s.release(true)
	for range 31 {
		s.release(false)
	}
	if n := s.slots(); n != 17 {
		t.Fatalf("after a slow probe and 31 on time: %d slots, want 16 and one back", n)
	}
	takes(17, "after a slow probe")
	if n := s.slots(); n != 18 {
		t.Fatalf("after 17 more on time: %d slots, want 18", n)
	}

	// Slow probes with none other in flight: halved at once, never
	// below minProbeSlots.
	for range 5 {
		if err := s.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.release(true)
	}
	if n := s.slots(); n != minProbeSlots {
		t.Fatalf("after five slow probes: %d slots, want %d", n, minProbeSlots)
	}
	takes(minProbeSlots, "at the fewest")

	// Back up to the most, and no further.
	for range 2000 {
		if err := s.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.release(false)
	}
	if n := s.slots(); n != 32 {
		t.Fatalf("after many on time: %d slots, want 32", n)
	}
	takes(32, "back at the most")

	few := newProbeSlots(2)
	if err := few.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	few.release(true)
	if n := few.slots(); n != 2 {
		t.Fatalf("a prober of 2 slots after a slow probe: %d, want 2", n)
	}
}
