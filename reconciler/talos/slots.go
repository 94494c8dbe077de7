package talos

import (
	"context"
	"sync"
)

// minProbeSlots is the fewest probes that run at once however late they
// come, unless the prober's Concurrency is lower.
const minProbeSlots = 4

// probeSlots bound the probes that run at once, and their number follows
// how the probes fare (additive increase, multiplicative decrease). A
// probe that came late and answered when asked again, on a connection of
// its own, tells of a machine that answers but not within the timeout
// while so many probes run: a loaded server, or a loaded host of many
// machines, at a restart that probes the whole fleet at once. Such a
// probe halves the slots, down to minProbeSlots, so that the probes after
// it each get more of the CPU instead of all coming late; the probes that
// began before the slots were last halved change nothing, as they ran
// with as many beside them (they come late together). Each run of as many
// probes on time as there are slots adds one back, up to the Concurrency.
// A machine that is gone stays silent on both attempts and changes
// nothing: a fleet with dead machines is not probed more slowly.
type probeSlots struct {
	// sem holds a token for each slot in use and each slot held out of
	// use; its capacity is the Concurrency.
	sem chan struct{}

	mu     sync.Mutex
	limit  int // the slots in use at most now
	held   int // tokens in sem for slots out of use: cap(sem) - limit, once probes ended
	onTime int // probes on time since the limit last changed
	halved int // how many times the limit was halved: a probe's epoch
}

func newProbeSlots(n int) *probeSlots {
	return &probeSlots{sem: make(chan struct{}, n), limit: n}
}

// acquire waits for a slot, or for ctx to end, and returns the epoch
// to release it with.
func (s *probeSlots) acquire(ctx context.Context) (epoch int, err error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.halved, nil
}

// slotsChange is what a release did to the slots.
type slotsChange uint8

const (
	slotsKept   slotsChange = iota
	slotsHalved             // a probe came late: fewer run at once
	slotsFull               // back to the Concurrency after a halving
)

// release frees a slot taken at epoch; slow says that its probe came
// late and answered when asked again. It returns what that did to the
// slots, and how many there are now.
func (s *probeSlots) release(epoch int, slow bool) (slotsChange, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change := slotsKept
	switch {
	case slow && epoch != s.halved:
		// Begun before the last halving: it tells nothing of the slots now.
	case slow:
		if was := s.limit; was > min(minProbeSlots, cap(s.sem)) {
			s.limit = max(was/2, minProbeSlots)
			change = slotsHalved
		}
		s.onTime = 0
		s.halved++
	case s.limit < cap(s.sem):
		if s.onTime++; s.onTime >= s.limit {
			s.limit++
			s.onTime = 0
			if s.limit == cap(s.sem) {
				change = slotsFull
			}
		}
	}
	s.returnLocked()
	return change, s.limit
}

// returnLocked hands back the token of a released slot, or keeps it out
// of use while the limit asks for fewer slots. Called with s.mu held.
func (s *probeSlots) returnLocked() {
	if s.held < cap(s.sem)-s.limit {
		s.held++ // the slot goes out of use with its token
		s.holdFreeLocked()
		return
	}
	<-s.sem
	for ; s.held > cap(s.sem)-s.limit; s.held-- {
		<-s.sem // a slot held out of use comes back
	}
}

// holdFreeLocked takes the free slots out of use while fewer are held
// than the limit asks, so that a halved limit holds at once instead of
// as the probes in flight end. Called with s.mu held.
func (s *probeSlots) holdFreeLocked() {
	for s.held < cap(s.sem)-s.limit {
		select {
		case s.sem <- struct{}{}:
			s.held++
		default:
			return
		}
	}
}

// slots returns how many probes may run at once now.
func (s *probeSlots) slots() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}
