//go:build unix

package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lock takes the store's writer lock, an exclusive flock on <dir>/.lock that
// serialises writers within and across processes.
func (s *Store) lock() (unlock func(), err error) {
	p := filepath.Join(s.dir, ".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock machine store: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock machine store %s: %w", p, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
