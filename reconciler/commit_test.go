package reconciler

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// The record of a commit carries every tenant's result, so writing it at
// every tenant's event costs the square of the fleet. A revision whose
// 300 queued tenants are all superseded by the next one writes its record
// a few times, not once per tenant; and the progress of a commit of n
// tenants waits at most n/100 times progressDelay.
func TestCommitProgressWritesAreSpaced(t *testing.T) {
	const n = 300
	r := newRigWith(t, func(o *Options) { o.Debounce = time.Hour })
	writes := countWrites(r.srv.Store())
	fleet := manifestfleet.TenFiles(n).MapFS()
	first := r.rec.Submit(sources.Snapshot{Revision: "rev1", Ref: "refs/heads/main", FS: fleet, Root: "."})
	if c := first.Commit(); c.Status.Phase != schema.CommitPlanning || len(c.Status.Tenants) != n {
		t.Fatalf("rev1 %s with %d results: want %d tenants queued", c.Status.Phase, len(c.Status.Tenants), n)
	}
	r.rec.Submit(sources.Snapshot{Revision: "rev2", Ref: "refs/heads/main", FS: fleet, Root: "."})
	select {
	case <-first.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("rev1 did not finish once rev2 superseded its tenants")
	}
	c := first.Commit()
	if c.Status.Phase != schema.CommitSuperseded {
		t.Errorf("rev1 is %s, want %s", c.Status.Phase, schema.CommitSuperseded)
	}
	rev1 := 0
	for _, name := range writes.reset()[schema.KindCommit] {
		if name == schema.CommitName("rev1") {
			rev1++
		}
	}
	if rev1 == 0 || rev1 > 4 {
		t.Errorf("rev1's record was written %d times while its %d tenants were superseded, want a few", rev1, n)
	}
	if got, want := first.progressInterval(), 3*progressDelay; got != want {
		t.Errorf("the progress of %d tenants waits %v, want %v", n, got, want)
	}
}
