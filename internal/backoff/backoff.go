// Package backoff is the one exponential backoff of the project: the
// wait before the next attempt after failures in a row. Every retry loop
// takes its waits from a Policy with its own base, cap and jitter: tenant
// runs (reconciler), commit status deliveries (reconciler/report), git
// polls (sources), watch reconnections (internal/client) and failed
// dashboard logins (backend).
//
// It computes durations only. It keeps no count of failures, starts no
// timer and reads no clock: a caller counts its own failures and adds the
// delay to its own clock, and a test replaces the random source, so that
// a delay is a pure function of the attempt. It imports nothing of the
// project.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: Base after the first failure, twice
// as long after each further one in a row, never more than Max. Jitter,
// when set, takes a random part of up to that fraction off each delay, so
// that clients that failed together spread out while every delay still
// grows (until the cap) and stays within it.
type Policy struct {
	Base, Max time.Duration
	// Jitter is the largest fraction of a delay taken off, in [0, 1): 0.2
	// takes up to a fifth off. 0 means none.
	Jitter float64
	// Rand returns a number in [0, 1); nil means math/rand/v2.Float64.
	Rand func() float64
}

// Delay is the wait after the attempt-th failure in a row (1 for the
// first; less than 1 counts as 1).
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		if d > p.Max/2 {
			d = p.Max // doubling would pass the cap (or overflow)
			break
		}
		d *= 2
	}
	d = min(d, p.Max)
	if p.Jitter <= 0 {
		return d
	}
	random := rand.Float64
	if p.Rand != nil {
		random = p.Rand
	}
	return d - time.Duration(random()*p.Jitter*float64(d))
}
