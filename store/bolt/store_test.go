package bolt

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/store"
)

func TestStoreOpenModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, DBFile): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %04o, want %04o", path, got, want)
		}
	}
	// A second open of the same store waits for the first and gives up.
	if _, err := Open(dir, &Options{OpenTimeout: 100 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second Open: %v, want an error saying the store is in use", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(loose, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(loose, nil); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("Open of a 0755 dir: %v, want a refusal that says how to fix it", err)
	}
	// An empty dir, such as a fresh `mkdir data`, is made private.
	empty := filepath.Join(t.TempDir(), "empty")
	os.Mkdir(empty, 0o755)
	os.Chmod(empty, 0o755)
	s, err := Open(empty, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, _ := os.Stat(empty); fi.Mode().Perm() != 0o700 {
		t.Errorf("empty data dir has mode %04o after Open, want 0700", fi.Mode().Perm())
	}
	if _, err := Open("", nil); err == nil {
		t.Fatal("Open without a dir succeeded")
	}
}

// TestEventLogOfOlderFile: a file whose resources changed without a log
// (as an older build wrote it) starts its log at the current version.
func TestEventLogOfOlderFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	put := func(key string) uint64 {
		t.Helper()
		var rv uint64
		if err := s.Update(func(tx store.Tx) (err error) { rv, err = tx.Put("Record", key, []byte(`{}`)); return err }); err != nil {
			t.Fatal(err)
		}
		return rv
	}
	for i := range 7 {
		put(fmt.Sprint("t", i))
	}
	s.Close()
	db, err := bbolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		if err := tx.DeleteBucket(bucketEvents); err != nil {
			return err
		}
		seq := tx.Bucket(bucketMeta).Sequence()
		if err := tx.Bucket(bucketMeta).SetSequence(seq + 3); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Delete(keyEventsFrom)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	defer s.Close()
	logged := func() (from uint64, n int) {
		t.Helper()
		err := s.View(func(tx store.Tx) error {
			from = tx.EventsFrom()
			return tx.Events(from, func(store.Change) error { n++; return nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		return from, n
	}
	if f, n := logged(); f != 10 || n != 0 {
		t.Errorf("older file: log from %d with %d changes; want 10 and none", f, n)
	}
	if rv := put("t9"); rv != 11 {
		t.Errorf("the next change has revision %d, want 11", rv)
	}
	if f, n := logged(); f != 10 || n != 1 {
		t.Errorf("after a change: log from %d with %d changes; want 10 and 1", f, n)
	}
}
