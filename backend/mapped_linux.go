package backend

import (
	"fmt"

	"golang.org/x/sys/unix"

	bolt "go.etcd.io/bbolt"
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
	return s.db.View(func(tx *bolt.Tx) error {
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
