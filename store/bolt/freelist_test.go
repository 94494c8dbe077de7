package bolt

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
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

// TestStoreLeavesFreelistUnwritten: the store does not write bbolt's
// freelist with each commit (see Open), and a file that has one (as a
// build that wrote it left) loses it at the store's first commit.
func TestStoreLeavesFreelistUnwritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openStore(t, dir)
	s.Close()
	path := filepath.Join(dir, DBFile)
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{NoFreelistSync: false})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte("x"), []byte("y")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if !syncedFreelist(t, path) {
		t.Fatal("a file written with a freelist has none: the check reads the wrong bytes")
	}
	s = openStore(t, dir)
	if err := s.Update(func(tx store.Tx) error {
		_, err := tx.PutObject(schema.KindMachine, "m1", storetest.Machine("m1", "alpha", "w", schema.RoleWorker, "small", 1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if syncedFreelist(t, path) {
		t.Fatal("the store wrote bbolt's freelist with its commits")
	}
}

// BenchmarkSmallWriteWithFreePages: a small write transaction in a store
// whose file has many free pages, as one whose states churned does. One
// op is one write; with the freelist written each commit its cost grows
// with the free pages.
func BenchmarkSmallWriteWithFreePages(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "data")
	s, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	big := make([]byte, 64<<10)
	for i := range 40 {
		err := s.db.Update(func(tx *bbolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("bench-churn"))
			if err != nil {
				return err
			}
			for j := range 100 {
				if err := bk.Put(fmt.Appendf(nil, "%d-%d", i, j), big); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Update(func(tx *bbolt.Tx) error { return tx.DeleteBucket([]byte("bench-churn")) }); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(s.db.Stats().FreePageN), "free-pages")
	for b.Loop() {
		if err := s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put([]byte("bench"), []byte("x")) }); err != nil {
			b.Fatal(err)
		}
	}
}
