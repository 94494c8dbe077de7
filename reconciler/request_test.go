package reconciler

import (
	"slices"
	"testing"
	"time"
)

// TestQueueHurry: a retry that waits for a backoff of an hour runs at once
// when hurried; hurry says what it found, and keys lists the pending and
// running keys.
func TestQueueHurry(t *testing.T) {
	q := NewQueue(QueueOptions{Workers: 2})
	q.Start()
	defer q.Stop()
	log := newEventLog()
	if got := q.hurry("a"); got != hurryNothing {
		t.Errorf("hurry of an empty queue: %d, want hurryNothing", got)
	}
	hold := make(chan struct{})
	defer close(hold) // before Stop, which waits for b
	q.Enqueue("b", &probeJob{key: "b", rev: "r1", log: log, hold: hold})
	waitFor(t, "b to run", func() bool { return q.Running() == 1 })
	if !q.Retry("a", &probeJob{key: "a", rev: "retry", log: log}, time.Hour) {
		t.Fatal("Retry refused a key with nothing pending")
	}
	if got := q.keys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("keys %v, want [a b]", got)
	}
	if got := q.hurry("b"); got != hurryRunning {
		t.Errorf("hurry of a running key: %d, want hurryRunning", got)
	}
	if got := q.hurry("a"); got != hurryMoved {
		t.Errorf("hurry of a waiting retry: %d, want hurryMoved", got)
	}
	waitFor(t, "the hurried retry to run", func() bool { return slices.Contains(log.snapshot(), "start a retry") })
}
