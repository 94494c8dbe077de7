//go:build !unix

package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"
)

// lockStoreFile checks, by opening it read-only through bbolt, that no
// process holds the store file open (ErrLocked), and returns a release
// that does nothing: outside Unix the lock is not held while the file is
// replaced. A missing file needs no lock.
func lockStoreFile(path string) (unlock func(), err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return func() {}, nil
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if errors.Is(err, bbolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store %s: %w", path, ErrLocked)
	}
	if err == nil {
		db.Close()
	}
	return func() {}, nil
}
