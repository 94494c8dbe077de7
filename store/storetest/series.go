package storetest

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/store"
)

// seriesKeys returns the series area's keys under prefix with their
// bytes, in the order ScanSeries gives them.
func seriesKeys(t testing.TB, s store.Store, prefix string) []string {
	t.Helper()
	var got []string
	view(t, s, func(tx store.Tx) error {
		return tx.ScanSeries(prefix, func(key string, data []byte) error {
			got = append(got, key+"="+string(data))
			return nil
		})
	})
	return got
}

// testSeries: the series area stores, scans by prefix in key order and
// deletes bytes, keeps them across a reopen and drops a rolled-back
// transaction's, and none of its writes takes a revision, a change, a
// commit hook call or an event.
func testSeries(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := reopen(t, open, dir, Options{})
	rec := record(s)
	update(t, s, func(tx store.Tx) error {
		_, err := tx.Put("Record", "r", []byte(`{}`))
		return err
	})
	from, before := logged(t, s)
	update(t, s, func(tx store.Tx) error {
		for _, k := range []string{"b/2", "a/1", "b/1", "c", "b/10"} {
			if err := tx.PutSeries(k, []byte("v"+k)); err != nil {
				return err
			}
		}
		return tx.PutSeries("a/1", []byte("again"))
	})
	s.Update(func(tx store.Tx) error {
		tx.PutSeries("b/3", []byte("rolled back"))
		tx.DeleteSeries("c")
		return errRollBack
	})
	if got, want := seriesKeys(t, s, "b/"), []string{"b/1=vb/1", "b/10=vb/10", "b/2=vb/2"}; !cmp.Equal(got, want) {
		t.Fatalf("scan b/: %v, want %v", got, want)
	}
	if got, want := seriesKeys(t, s, ""), 5; len(got) != want {
		t.Fatalf("scan of all: %v, want %d keys", got, want)
	}
	view(t, s, func(tx store.Tx) error {
		if tx.PutSeries("x", nil) == nil {
			t.Error("PutSeries in a View: no error")
		}
		if v, err := tx.Series("a/1"); err != nil || string(v) != "again" {
			t.Errorf("series a/1: %q, %v; want again", v, err)
		}
		if _, err := tx.Series("b/3"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("series b/3 (rolled back): %v, want ErrNotFound", err)
		}
		if rv := tx.ResourceVersion(); rv != 1 {
			t.Errorf("resourceVersion after series writes: %d, want 1", rv)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		if tx.PutSeries("", []byte("x")) == nil {
			t.Error("PutSeries with an empty key: no error")
		}
		if err := tx.DeleteSeries("missing"); err != nil {
			t.Errorf("delete of a missing key: %v", err)
		}
		return tx.DeleteSeries("b/1")
	})
	if len(rec.commits) != 1 {
		t.Fatalf("commit hooks called %d times, want once (the record only)", len(rec.commits))
	}
	if f, after := logged(t, s); f != from || !cmp.Equal(after, before) {
		t.Fatalf("event log changed by series writes: %v, want %v", after, before)
	}
	s.Close()
	s = reopen(t, open, dir, Options{})
	if got, want := seriesKeys(t, s, "b"), []string{"b/10=vb/10", "b/2=vb/2"}; !cmp.Equal(got, want) {
		t.Fatalf("after reopen, scan b: %v, want %v", got, want)
	}
}
