package reconciler

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestBackoff: the delay grows with each failure in a row, never passes
// the cap, has jitter, and starts from the base again after a success.
func TestBackoff(t *testing.T) {
	for _, jitter := range []float64{0, 0.5, 0.999} {
		b := newBackoff(DefaultRetryBase, DefaultRetryMax)
		b.Rand = func() float64 { return jitter }
		var prev time.Duration
		for attempt := 1; attempt <= 12; attempt++ {
			d := b.Delay(attempt)
			if d > b.Max {
				t.Fatalf("jitter %v: attempt %d waits %v, over the cap %v", jitter, attempt, d, b.Max)
			}
			if d < b.Base*4/5 {
				t.Fatalf("jitter %v: attempt %d waits %v, less than the base allows", jitter, attempt, d)
			}
			if attempt <= 7 && d <= prev { // 10s·2⁶ = 640s: the cap is reached at the 7th
				t.Fatalf("jitter %v: attempt %d waits %v, not longer than attempt %d's %v", jitter, attempt, d, attempt-1, prev)
			}
			prev = d
		}
		if got := b.Delay(30); got < b.Max*4/5 {
			t.Errorf("jitter %v: a long run of failures waits %v, want about the cap", jitter, got)
		}
	}
	half := newBackoff(10*time.Second, time.Minute)
	half.Rand = func() float64 { return 0.5 }
	if d := half.Delay(1); d != 9*time.Second {
		t.Errorf("first delay with jitter 0.5: %v, want 9s (a tenth taken off)", d)
	}

	// Next counts failures in a row on the clock it is given; a success
	// clears the retry (nil), and the count starts again.
	clock := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	b := newBackoff(time.Second, 8*time.Second)
	b.Rand = func() float64 { return 0 }
	var r *schema.RetryStatus
	for i, want := range []time.Duration{1, 2, 4, 8, 8} {
		n := b.Next(r, schema.ReasonTofuFailed, clock)
		if n.Attempts != i+1 || n.NextAttemptAt.Sub(clock) != want*time.Second || n.LastReason != schema.ReasonTofuFailed {
			t.Fatalf("failure %d: %+v, want attempt %d in %vs", i+1, n, i+1, want)
		}
		r = &n
	}
	if n := b.Next(nil, schema.ReasonStateLocked, clock); n.Attempts != 1 || n.NextAttemptAt.Sub(clock) != time.Second {
		t.Errorf("after a success: %+v, want attempt 1 after the base", n)
	}
}
