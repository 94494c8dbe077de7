//go:build unix

package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// FileLock returns a lock for Refreshing.WithLock: an exclusive flock on
// path (created 0600 when missing), which every process that shares the
// stored login takes, waiting for it until ctx ends.
func FileLock(path string) func(context.Context) (func(), error) {
	return func(ctx context.Context) (func(), error) {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		for {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				return func() { f.Close() }, nil // closing releases the lock
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
				f.Close()
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			select {
			case <-ctx.Done():
				f.Close()
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
