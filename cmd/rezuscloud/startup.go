package main

import (
	"sync"

	"github.com/rezuscloud/rezuscloud/schema"
)

// startupDone is closed once start-up's reads are over: the observer's
// first pass through the fleet (every tenant's secrets bundle, read from
// its state) and the reconciler's first finished commit (what it reads
// of the applied fleet) have both happened.
type startupDone struct {
	mu                  sync.Mutex
	observed, committed bool
	done                chan struct{}
}

func newStartupDone() *startupDone { return &startupDone{done: make(chan struct{})} }

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
	defer s.mu.Unlock()
	was := s.observed && s.committed
	*flag = true
	if s.observed && s.committed && !was {
		close(s.done)
	}
}
