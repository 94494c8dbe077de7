package main

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestStartupDoneReleasesOnceAfterBoth: start-up's memory is released
// once, when both the observer's first pass and the first finished
// commit have happened, in either order; a commit still in progress does
// not count, and the reports' hook sees every commit.
func TestStartupDoneReleasesOnceAfterBoth(t *testing.T) {
	for _, observeFirst := range []bool{true, false} {
		released := make(chan struct{}, 4)
		s := &startupDone{release: func() { released <- struct{}{} }}
		reported := 0
		hook := s.onCommit(func(*schema.Commit) { reported++ })
		running := &schema.Commit{Status: schema.CommitStatus{Phase: schema.CommitApplying}}
		applied := &schema.Commit{Status: schema.CommitStatus{Phase: schema.CommitSucceeded}}
		if observeFirst {
			s.observedOnce()
			hook(running)
		} else {
			hook(running)
			hook(applied)
		}
		select {
		case <-released:
			t.Fatalf("observe first %v: released before start-up was over", observeFirst)
		case <-time.After(50 * time.Millisecond):
		}
		if observeFirst {
			hook(applied)
		} else {
			s.observedOnce()
		}
		hook(applied)
		s.observedOnce()
		select {
		case <-released:
		case <-time.After(5 * time.Second):
			t.Fatalf("observe first %v: not released after both", observeFirst)
		}
		select {
		case <-released:
			t.Fatalf("observe first %v: released twice", observeFirst)
		case <-time.After(50 * time.Millisecond):
		}
		if reported != 3 {
			t.Errorf("observe first %v: the reports saw %d commits", observeFirst, reported)
		}
	}
}
