package backoff

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestDelayDoublesToTheCap: without jitter the delays are the base,
// doubled after each failure in a row, and the cap from where doubling
// would pass it, however many failures follow.
func TestDelayDoublesToTheCap(t *testing.T) {
	p := Policy{Base: time.Second, Max: 10 * time.Second}
	want := []time.Duration{1, 1, 1, 2, 4, 8, 10, 10}
	for i, w := range want {
		attempt := i - 1 // -1 and 0 count as the first failure
		if got := p.Delay(attempt); got != w*time.Second {
			t.Errorf("Delay(%d) = %v, want %v", attempt, got, w*time.Second)
		}
	}
	for _, attempt := range []int{64, 1000, math.MaxInt} {
		if got := p.Delay(attempt); got != p.Max {
			t.Errorf("Delay(%d) = %v, want the cap %v", attempt, got, p.Max)
		}
	}
	huge := Policy{Base: time.Nanosecond, Max: math.MaxInt64}
	if got := huge.Delay(200); got != huge.Max {
		t.Errorf("a cap near the largest duration: Delay(200) = %v, want %v (no overflow)", got, huge.Max)
	}
	if got := (Policy{Base: time.Minute, Max: time.Second}).Delay(1); got != time.Second {
		t.Errorf("a base over the cap: Delay(1) = %v, want the cap", got)
	}
}

// TestJitterTakesOffAtMostItsFraction: the random part comes from Rand,
// and the delay stays within (1-Jitter)·d and d, so that it still grows
// from one failure to the next until the cap.
func TestJitterTakesOffAtMostItsFraction(t *testing.T) {
	for _, r := range []float64{0, 0.5, 0.999} {
		p := Policy{Base: 10 * time.Second, Max: 10 * time.Minute, Jitter: 0.2, Rand: func() float64 { return r }}
		plain := Policy{Base: p.Base, Max: p.Max}
		var prev time.Duration
		for attempt := 1; attempt <= 12; attempt++ {
			d, full := p.Delay(attempt), plain.Delay(attempt)
			if d > full || d < full*4/5 {
				t.Fatalf("rand %v: attempt %d waits %v, want within [%v, %v]", r, attempt, d, full*4/5, full)
			}
			if attempt <= 7 && d <= prev { // 10s·2⁶ = 640s: the cap is reached at the 7th
				t.Fatalf("rand %v: attempt %d waits %v, not longer than attempt %d's %v", r, attempt, d, attempt-1, prev)
			}
			prev = d
		}
	}
	half := Policy{Base: 10 * time.Second, Max: time.Minute, Jitter: 0.2, Rand: func() float64 { return 0.5 }}
	if d := half.Delay(1); d != 9*time.Second {
		t.Errorf("first delay with rand 0.5: %v, want 9s (a tenth taken off)", d)
	}
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[Policy{Base: time.Second, Max: time.Minute, Jitter: 0.5}.Delay(3)] = true
	}
	if len(seen) < 2 {
		t.Errorf("the default random source gave one delay in 20 tries: %v", seen)
	}
}

// A retry loop counts its failures in a row and waits Delay of the count.
func ExamplePolicy() {
	p := Policy{Base: 500 * time.Millisecond, Max: 30 * time.Second}
	for failures := 1; failures <= 8; failures++ {
		fmt.Print(p.Delay(failures), " ")
	}
	fmt.Println()
	// Output: 500ms 1s 2s 4s 8s 16s 30s 30s
}
