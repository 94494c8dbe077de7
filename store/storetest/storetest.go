// Package storetest is the conformance suite of the store's engines: Run
// checks that an engine keeps the promises of package store (revisions,
// watches from a revision, Gone past the horizon, transactions that
// commit whole under concurrent writers and across a crash, the state and
// lock rules, large values). Every engine runs it in its tests. It also
// holds the fixtures (objects of the API kinds) that the tests of the
// store and of the API share.
//
// It must not import backend, reconciler, render, cmd or sources.
package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/store"
)

// Options are the settings the suite gives an engine when it opens a
// store.
type Options struct {
	// EventHistory is how many changes the event log keeps; 0 selects
	// the engine's default.
	EventHistory int
	// Now is the clock that stamps createdAt and updatedAt; nil selects
	// the engine's.
	Now func() time.Time
}

// Opener opens the engine's store in dir with opts: a new one when dir is
// empty, else the one an earlier open left there (closed, or abandoned by
// a process that was killed). It fails t when it cannot. The suite closes
// what it opens.
type Opener func(t testing.TB, dir string, opts Options) store.Store

// Run runs the conformance suite against the engine open opens, each
// check as a subtest of t. It takes seconds. The crash check runs the
// test binary again as a child process (see crash.go), so Run must be
// called from a test, once, and not from a subtest's parallel section.
func Run(t *testing.T, open Opener) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"records", testRecords},
		{"stamps", testStamps},
		{"tenant_index", testTenantIndex},
		{"revisions_across_reopen", testRevisions},
		{"event_log", testEventLog},
		{"gone_past_horizon", testGone},
		{"watch_resumes", testWatchResumes},
		{"concurrent_writers", testConcurrentWriters},
		{"locks", testLocks},
		{"state_history", testStateHistory},
		{"large_values", testLargeValues},
		{"series", testSeries},
		{"crash", testCrash},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// reopen opens the store in dir with opts and closes it when t ends,
// unless the test closed it first.
func reopen(t *testing.T, open Opener, dir string, opts Options) store.Store {
	t.Helper()
	s := open(t, dir, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

// update runs fn in a write transaction and fails t on an error.
func update(t testing.TB, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// view runs fn in a read transaction and fails t on an error.
func view(t testing.TB, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatal(err)
	}
}

// recorder collects the changes of every commit, in hook order.
type recorder struct{ commits [][]store.Change }

func record(s store.Store) *recorder {
	r := &recorder{}
	s.OnCommit(func(cs []store.Change) {
		// A change's Object may point into memory the engine reuses.
		out := make([]store.Change, len(cs))
		for i, c := range cs {
			c.Resource.Object = append([]byte(nil), c.Resource.Object...)
			out[i] = c
		}
		r.commits = append(r.commits, out)
	})
	return r
}

// revisions returns the revisions of every recorded change, in order.
func (r *recorder) revisions() []uint64 {
	var out []uint64
	for _, cs := range r.commits {
		for _, c := range cs {
			out = append(out, c.Resource.ResourceVersion)
		}
	}
	return out
}

// strictlyIncreasing fails t unless rvs strictly increase.
func strictlyIncreasing(t testing.TB, what string, rvs []uint64) {
	t.Helper()
	for i := 1; i < len(rvs); i++ {
		if rvs[i] <= rvs[i-1] {
			t.Fatalf("%s: revisions %v do not strictly increase at %d", what, rvs, i)
		}
	}
}

// putRecord stores v as JSON in the internal record kind/key.
func putRecord(tx store.Tx, kind, key string, v any) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	return tx.Put(kind, key, b)
}

// getRecord decodes the internal record kind/key into v.
func getRecord(tx store.Tx, kind, key string, v any) error {
	return tx.GetObject(kind, key, v)
}

// errRollBack makes a transaction roll back.
var errRollBack = errors.New("roll back")

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func name(prefix string, i int) string { return fmt.Sprintf("%s%03d", prefix, i) }
