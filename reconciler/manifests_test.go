package reconciler

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The manifest cache's file is a cache: one that bbolt cannot read is made
// anew, the values of another build's format are dropped, and a path keeps
// only the value of its latest content.
func TestManifestStoreIsACache(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, manifestsFile)
	if err := os.WriteFile(path, []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := openManifestStore(dir)
	if err != nil {
		t.Fatalf("a file bbolt cannot read: %v", err)
	}
	if err := s.Put(map[string][]byte{"t/a.yaml\x00h1": []byte("one")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(map[string][]byte{"t/a.yaml\x00h2": []byte("two"), "t/b.yaml\x00h3": []byte("three")}); err != nil {
		t.Fatal(err)
	}
	if v := s.Get("t/a.yaml\x00h1"); v != nil {
		t.Errorf("the value of a path's earlier content is kept: %q", v)
	}
	if v := string(s.Get("t/a.yaml\x00h2")); v != "two" {
		t.Errorf("t/a.yaml = %q, want two", v)
	}
	if err := s.Retain(map[string]bool{"t/b.yaml\x00h3": true}); err != nil {
		t.Fatal(err)
	}
	if v := s.Get("t/a.yaml\x00h2"); v != nil || string(s.Get("t/b.yaml\x00h3")) != "three" {
		t.Errorf("after Retain: a %q, b %q", v, s.Get("t/b.yaml\x00h3"))
	}
	s.Close()

	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("another build's format"))
		if err != nil {
			return err
		}
		return b.Put([]byte("t/c.yaml\x00h4"), []byte("old"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = openManifestStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if string(s.Get("t/b.yaml\x00h3")) != "three" {
		t.Error("reopening lost this build's values")
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("another build's format")) != nil {
			t.Error("another build's values are kept")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A Put larger than putChunk goes in several transactions, so that bbolt
// never holds the pages of a whole first load at once; every value lands,
// and each path still keeps only its newest value.
func TestManifestStorePutsInChunks(t *testing.T) {
	s, err := openManifestStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(map[string][]byte{"t0000/a.yaml\x00old": []byte("old"), "t0999/a.yaml\x00old": []byte("old")}); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 6<<10)
	values := map[string][]byte{}
	for i := range 1000 { // 6 MB: three chunks or more
		values[fmt.Sprintf("t%04d/a.yaml\x00new", i)] = value
	}
	before := s.lastTx(t)
	if err := s.Put(values); err != nil {
		t.Fatal(err)
	}
	if n := s.lastTx(t) - before; n < 3 {
		t.Errorf("a Put of 6 MB took %d transactions, want one per %d bytes", n, putChunk)
	}
	for key := range values {
		if !bytes.Equal(s.Get(key), value) {
			t.Fatalf("%q was not stored", key)
		}
	}
	for _, key := range []string{"t0000/a.yaml\x00old", "t0999/a.yaml\x00old"} {
		if s.Get(key) != nil {
			t.Errorf("%q is kept beside its path's new value", key)
		}
	}
}

// lastTx returns the id of the store's last write transaction.
func (s *manifestStore) lastTx(t *testing.T) int {
	tx, err := s.db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	return tx.ID()
}
