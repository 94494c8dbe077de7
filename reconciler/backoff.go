package reconciler

import (
	"time"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Defaults of the retry backoff (Options.RetryBase, Options.RetryMax).
const (
	DefaultRetryBase = 10 * time.Second
	DefaultRetryMax  = 10 * time.Minute
)

// retryJitter is the largest fraction of a retry's delay taken off at
// random: a fifth, so that tenants that failed together spread out.
const retryJitter = 0.2

// Backoff says when a tenant whose run failed for a passing reason runs
// again: after its policy's Delay, Base after the first failure, twice as
// long after each further one, never more than Max, with up to a fifth
// taken off each delay (see package backoff).
type Backoff struct {
	backoff.Policy
}

// newBackoff returns the retry backoff from base to max.
func newBackoff(base, max time.Duration) Backoff {
	return Backoff{backoff.Policy{Base: base, Max: max, Jitter: retryJitter}}
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
