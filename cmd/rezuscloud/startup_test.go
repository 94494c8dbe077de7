package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestStartupDoneAfterBoth: start-up is over once both the observer's
// first pass and the first finished commit have happened, in either
// order; a commit still in progress does not count, and the reports'
// hook sees every commit.
func TestStartupDoneAfterBoth(t *testing.T) {
	for _, observeFirst := range []bool{true, false} {
		s := newStartupDone()
		reported := 0
		hook := s.onCommit(func(*schema.Commit) { reported++ })
		running := &schema.Commit{Status: schema.CommitStatus{Phase: schema.CommitApplying}}
		finished := &schema.Commit{Status: schema.CommitStatus{Phase: schema.CommitSucceeded}}
		if observeFirst {
			s.observedOnce()
			hook(running)
		} else {
			hook(running)
			hook(finished)
		}
		select {
		case <-s.done:
			t.Fatalf("observe first %v: done before start-up was over", observeFirst)
		default:
		}
		if observeFirst {
			hook(finished)
		} else {
			s.observedOnce()
		}
		hook(finished) // again: done is closed only once
		s.observedOnce()
		select {
		case <-s.done:
		default:
			t.Fatalf("observe first %v: not done after both", observeFirst)
		}
		if reported != 3 {
			t.Errorf("observe first %v: the reports saw %d commits, want 3", observeFirst, reported)
		}
	}
}

// releaseCount counts the releases asked of it.
type releaseCount struct{ n atomic.Int64 }

func (r *releaseCount) ReleaseMapped() error { r.n.Add(1); return nil }

// TestReleaseMemoryAfterStartup: nothing is released before start-up is
// over; then at once, and again every interval until ctx ends.
func TestReleaseMemoryAfterStartup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var store releaseCount
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		releaseMemory(ctx, &store, done, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	time.Sleep(60 * time.Millisecond)
	if n := store.n.Load(); n != 0 {
		t.Fatalf("%d releases before start-up was over", n)
	}
	close(done)
	deadline := time.Now().Add(10 * time.Second)
	for store.n.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := store.n.Load(); n < 3 {
		t.Fatalf("%d releases after start-up, want one and then one every interval", n)
	}
	cancel()
	<-stopped
	n := store.n.Load()
	time.Sleep(60 * time.Millisecond)
	if m := store.n.Load(); m != n {
		t.Fatalf("%d releases after ctx ended", m-n)
	}
}
