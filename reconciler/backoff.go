package reconciler

import (
	"math/rand/v2"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Defaults of the retry backoff (Options.RetryBase, Options.RetryMax).
const (
	DefaultRetryBase = 10 * time.Second
	DefaultRetryMax  = 10 * time.Minute
)

// Backoff says when a tenant whose run failed for a passing reason runs
// again: Base after the first failure, twice as long after each further
// one, never more than Max. Jitter takes up to a fifth off each delay, so
// that tenants that failed together spread out while every delay still
// grows (until the cap) and stays within it.
type Backoff struct {
	Base, Max time.Duration
	// Jitter returns a number in [0, 1); nil means math/rand/v2.
	Jitter func() float64
}

// Delay is the wait after the attempt-th failure in a row (1 for the
// first).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Base
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	jitter := rand.Float64
	if b.Jitter != nil {
		jitter = b.Jitter
	}
	return d - time.Duration(jitter()*float64(d/5))
}

// Next returns the retry after one more failure for reason at now, given
// the retry of the failures before it (nil: none; a success clears it).
func (b Backoff) Next(prev *schema.RetryStatus, reason string, now time.Time) schema.RetryStatus {
	attempts := 1
	if prev != nil {
		attempts = prev.Attempts + 1
	}
	return schema.RetryStatus{Attempts: attempts, NextAttemptAt: now.Add(b.Delay(attempts)), LastReason: reason}
}
