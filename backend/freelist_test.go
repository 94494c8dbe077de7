package backend

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
)

// syncedFreelist reads the newer of a bbolt file's two meta pages and
// reports whether it names a freelist page: when it does, bbolt reads the
// free pages from there on open instead of walking every page of the
// file.
func syncedFreelist(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A meta page: a 16-byte page header, then magic, version, page
	// size, flags (4 bytes each), the root bucket (16), the freelist's
	// page id (8), the high water mark (8) and the transaction id (8).
	const header, freelist, txid = 16, 16 + 16 + 16, 16 + 16 + 16 + 16
	size := int(binary.LittleEndian.Uint32(b[header+8:]))
	var best []byte
	for _, off := range []int{0, size} {
		m := b[off : off+size]
		if best == nil || binary.LittleEndian.Uint64(m[txid:]) > binary.LittleEndian.Uint64(best[txid:]) {
			best = m
		}
	}
	return binary.LittleEndian.Uint64(best[freelist:]) != 0xffffffffffffffff
}

// TestStoreSyncsFreelist: the store writes bbolt's freelist, so that a
// restart does not read the whole file; a file written without one (as
// earlier builds did) gets one when the store opens it.
func TestStoreSyncsFreelist(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	putObj(t, s, schema.KindMachine, "m1", machineObj("m1", "alpha", "w", schema.RoleWorker, "small", 1))
	s.Close()
	path := filepath.Join(dir, DBFile)
	if !syncedFreelist(t, path) {
		t.Fatal("the store's file has no freelist page")
	}

	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte("x"), []byte("y")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if syncedFreelist(t, path) {
		t.Fatal("a file written without a freelist has one: the check reads the wrong bytes")
	}
	s = openStore(t, dir)
	s.Close()
	if !syncedFreelist(t, path) {
		t.Fatal("opening a file without a freelist did not write one")
	}
}
