//go:build unix

package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// lockStoreFile takes the lock that bbolt takes on a store file it opens
// for writing (flock, exclusive), without waiting, and returns its
// release. It gives ErrLocked when a process holds the file open. A
// missing file needs no lock.
func lockStoreFile(path string) (unlock func(), err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store %s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock store %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
