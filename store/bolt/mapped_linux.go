package bolt

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	bbolt "go.etcd.io/bbolt"
)

// ReleaseMapped tells the kernel that the process no longer needs the
// pages of the store's file that it has read so far (madvise
// MADV_DONTNEED on bbolt's read-only shared mapping). They stay in the
// page cache, where the kernel reclaims them when memory is short, but
// no longer count in the server's resident memory; a later read maps a
// page again from the cache or the disk. bbolt writes with pwrite, never
// through the mapping, so nothing is lost. Open calls it after bbolt's
// walk of every page (the freelist is rebuilt on open, see Open); the
// server calls it once more after its start-up reads.
func (s *Store) ReleaseMapped() error {
	// A read transaction holds bbolt's mapping lock: the file cannot be
	// remapped meanwhile.
	return s.db.View(func(tx *bbolt.Tx) error {
		data, size := s.db.Info().Data, tx.Size()
		if data == 0 || size <= 0 {
			return nil
		}
		// The address is bbolt's own mapping, page aligned; passing it as
		// a number keeps it out of Go's pointer rules.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, data, uintptr(size), unix.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("release the store's mapped pages: %w", errno)
		}
		return nil
	})
}

// releaseRead releases the pages of the store's mapping that hold b, a
// value read in tx that the caller has copied and needs no more. It does
// nothing in a write transaction, or when b is not in the mapping (a
// value a write transaction changed lives in Go's memory).
func (tx *Tx) releaseRead(b []byte) {
	if len(b) == 0 || tx.tx.Writable() {
		return
	}
	data, size := tx.tx.DB().Info().Data, uintptr(tx.tx.Size())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	if data == 0 || start < data || end > data+size {
		return
	}
	page := uintptr(os.Getpagesize())
	start, end = start&^(page-1), min((end+page-1)&^(page-1), data+size)
	// The read transaction holds bbolt's mapping lock; a page that also
	// holds other values is mapped again when they are read.
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
}
