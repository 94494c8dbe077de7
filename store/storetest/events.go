package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/store"
)

// logged returns the event log's horizon and the changes after it.
func logged(t testing.TB, s store.Store) (uint64, []string) {
	t.Helper()
	var from uint64
	var got []string
	view(t, s, func(tx store.Tx) error {
		from = tx.EventsFrom()
		return tx.Events(from, func(c store.Change) error {
			got = append(got, fmt.Sprintf("%d %s %s/%s %s", c.Resource.ResourceVersion, c.Type, c.Resource.Kind, c.Resource.Name, c.Resource.Object))
			return nil
		})
	})
	return from, got
}

// testEventLog: the log holds every committed change, of every kind, and
// nothing of a rolled-back transaction; it keeps the latest EventHistory
// changes, and what it holds survives a reopen with a longer history.
func testEventLog(t *testing.T, open Opener) {
	const record = "Record" // an internal kind: stored as it is given
	dir := t.TempDir()
	s := open(t, dir, Options{EventHistory: 5})
	if from, got := logged(t, s); from != 0 || len(got) != 0 {
		t.Fatalf("new store: from %d, %v; want 0 and nothing", from, got)
	}
	update(t, s, func(tx store.Tx) error {
		for i := range 4 {
			if _, err := tx.Put(record, fmt.Sprint("t", i), fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
				return err
			}
		}
		return nil
	})
	s.Update(func(tx store.Tx) error {
		tx.Put(record, "gone", []byte(`{}`))
		return errRollBack
	})
	update(t, s, func(tx store.Tx) error {
		if _, err := tx.Put(record, "t0", []byte(`{"n":10}`)); err != nil {
			return err
		}
		if _, err := tx.Delete(record, "t1"); err != nil {
			return err
		}
		_, err := tx.Put("AppliedTenant", "t2", []byte(`{"n":2}`))
		return err
	})
	from, got := logged(t, s)
	want := []string{
		`3 ADDED Record/t2 {"n":2}`,
		`4 ADDED Record/t3 {"n":3}`,
		`5 MODIFIED Record/t0 {"n":10}`,
		`6 DELETED Record/t1 {"n":1}`,
		`7 ADDED AppliedTenant/t2 {"n":2}`,
	}
	if from != 2 || !cmp.Equal(want, got) {
		t.Fatalf("log from %d (-want +got):\n%s\nwant from 2", from, cmp.Diff(want, got))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, open, dir, Options{EventHistory: 100})
	if f, g := logged(t, s); f != 2 || !cmp.Equal(want, g) {
		t.Errorf("reopened with a longer history: from %d, %v; want 2 and the same changes", f, g)
	}
}

// testGone: past the log's horizon, Events answers ErrGone and calls fn
// for nothing; from the horizon on, it answers every change.
func testGone(t *testing.T, open Opener) {
	s := reopen(t, open, t.TempDir(), Options{EventHistory: 5})
	for i := range 12 {
		update(t, s, func(tx store.Tx) error { _, err := putRecord(tx, "Record", name("r", i%4), i); return err })
	}
	view(t, s, func(tx store.Tx) error {
		from := tx.EventsFrom()
		if latest := tx.ResourceVersion(); latest != 12 || from < 7 || from > latest {
			t.Fatalf("after 12 changes with a history of 5: latest %d, log from %d; want 12 and from 7 to 12", latest, from)
		}
		called := 0
		err := tx.Events(from-1, func(store.Change) error { called++; return nil })
		if !errors.Is(err, store.ErrGone) || called != 0 {
			t.Errorf("Events(%d) below the horizon %d: %v after %d changes; want ErrGone before any", from-1, from, err, called)
		}
		if err := tx.Events(0, func(store.Change) error { called++; return nil }); !errors.Is(err, store.ErrGone) {
			t.Errorf("Events(0): %v, want ErrGone", err)
		}
		var rvs []uint64
		if err := tx.Events(from, func(c store.Change) error { rvs = append(rvs, c.Resource.ResourceVersion); return nil }); err != nil {
			return err
		}
		var want []uint64
		for rv := from + 1; rv <= 12; rv++ {
			want = append(want, rv)
		}
		if !cmp.Equal(want, rvs) {
			t.Errorf("Events(%d) = %v, want %v", from, rvs, want)
		}
		return nil
	})
}

// testWatchResumes: a reader that follows the log from the last revision
// it saw, while writers commit, sees every change once, in order: none
// lost, none repeated; and resumes across a reopen.
func testWatchResumes(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	rec := record(s)
	// The reader follows when a commit says there is more.
	more := make(chan struct{}, 1)
	s.OnCommit(func([]store.Change) {
		select {
		case more <- struct{}{}:
		default:
		}
	})
	const writers, commits = 3, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range commits {
				err := s.Update(func(tx store.Tx) error {
					for j := range 1 + i%3 {
						if _, err := putRecord(tx, "Watched", fmt.Sprintf("w%d-%d", w, j), i); err != nil {
							return err
						}
					}
					if i%5 == 4 {
						_, err := tx.Delete("Watched", fmt.Sprintf("w%d-0", w))
						return err
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var seen []uint64
	follow := func(s store.Store) {
		view(t, s, func(tx store.Tx) error {
			after := uint64(0)
			if len(seen) > 0 {
				after = seen[len(seen)-1]
			}
			return tx.Events(after, func(c store.Change) error {
				seen = append(seen, c.Resource.ResourceVersion)
				return nil
			})
		})
	}
	for running := true; running; {
		select {
		case <-more:
		case <-done:
			running = false
		}
		follow(s)
	}
	strictlyIncreasing(t, "followed changes", seen)
	if want := rec.revisions(); !cmp.Equal(want, seen) {
		t.Fatalf("followed %d changes, committed %d (-committed +followed):\n%s", len(seen), len(want), cmp.Diff(want, seen))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, open, dir, Options{})
	n := len(seen)
	follow(s)
	if len(seen) != n {
		t.Fatalf("after a reopen the log has %d changes after the last one followed", len(seen)-n)
	}
	rec = record(s)
	update(t, s, func(tx store.Tx) error { _, err := putRecord(tx, "Watched", "after", 1); return err })
	follow(s)
	if got := seen[n:]; !cmp.Equal(rec.revisions(), got) || got[0] <= seen[n-1] {
		t.Errorf("after a reopen the watch resumed with %v, want the one new change %v after %d", got, rec.revisions(), seen[n-1])
	}
}
