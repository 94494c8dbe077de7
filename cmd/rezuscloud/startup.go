package main

import (
	"sync"

	"github.com/rezuscloud/rezuscloud/schema"
)

// startupDone calls release once, when start-up's reads are over: the
// observer's first pass through the fleet (every tenant's secrets bundle,
// read from its state) and the reconciler's first finished commit (what
// it reads of the applied fleet) have both happened.
type startupDone struct {
	mu                  sync.Mutex
	observed, committed bool
	release             func()
}

// observedOnce records the observer's first pass.
func (s *startupDone) observedOnce() { s.mark(&s.observed) }

// onCommit returns next wrapped so that the first finished commit is
// recorded; next may be nil.
func (s *startupDone) onCommit(next func(*schema.Commit)) func(*schema.Commit) {
	return func(c *schema.Commit) {
		if c.Status.Phase.Done() {
			s.mark(&s.committed)
		}
		if next != nil {
			next(c)
		}
	}
}

func (s *startupDone) mark(flag *bool) {
	s.mu.Lock()
	was := s.observed && s.committed
	*flag = true
	now := s.observed && s.committed
	release := s.release
	s.mu.Unlock()
	if now && !was && release != nil {
		go release() // a commit's hook must not block
	}
}
