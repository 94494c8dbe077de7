package bolt

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// openStore opens the store in dir with a short wait for the file lock.
func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, &Options{OpenTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the store's conformance suite against the engine.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t testing.TB, dir string, opts storetest.Options) store.Store {
		t.Helper()
		s, err := Open(dir, &Options{OpenTimeout: time.Second, EventHistory: opts.EventHistory, Now: opts.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
