package reconciler

import (
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
