package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// FaultsFile names the file in a store's directory that makes the
// simulated cloud fail, for tests of what happens when a cloud API errs:
// it holds a count N, and the next N machine changes (creates, updates,
// deletes) fail as a cloud answering 500 would, one fewer each time. The
// file goes once the count is used up.
const FaultsFile = "fail-next"

// ErrInjected is the error of a change that FaultsFile made fail.
var ErrInjected = errors.New("the simulated cloud failed this request (" + FaultsFile + ")")

// FailNext makes the next n machine changes fail (see FaultsFile); 0
// clears it.
func (s *Store) FailNext(n int) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	p := filepath.Join(s.dir, FaultsFile)
	if n <= 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return atomicfile.Write(p, []byte(strconv.Itoa(n)+"\n"), 0o600)
}

// TakeFault reports, under the store's lock, whether the change about to
// be made must fail, and counts the fault off FaultsFile. A machine
// change calls it first.
func (s *Store) TakeFault() error {
	p := filepath.Join(s.dir, FaultsFile)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return fmt.Errorf("%s: %q is not a count of faults", p, strings.TrimSpace(string(b)))
	}
	if n <= 1 {
		err = os.Remove(p)
	} else {
		err = atomicfile.Write(p, []byte(strconv.Itoa(n-1)+"\n"), 0o600)
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return ErrInjected
}

// SlowFile names the file in a store's directory that makes the simulated
// cloud slow to create machines, for tests of what an apply in flight
// does: it holds a duration, and each machine create waits that long
// before the machine is made, unless its request is cancelled first (as
// tofu cancels its provider's calls when it is interrupted), when it
// makes nothing. The file stays until SetCreateDelay(0).
const SlowFile = "slow-creates"

// WaitingFile names the file, beside SlowFile, that a create touches when
// it starts to wait: a test knows from it that a create is in flight.
const WaitingFile = SlowFile + ".waiting"

// SetCreateDelay makes every machine create wait d (see SlowFile); 0
// clears it.
func (s *Store) SetCreateDelay(d time.Duration) error {
	p := filepath.Join(s.dir, SlowFile)
	if d <= 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return atomicfile.Write(p, []byte(d.String()+"\n"), 0o600)
}

// WaitCreate waits as SlowFile says before a machine create; it returns
// an error, and the create must make nothing, when ctx ends first.
func (s *Store) WaitCreate(ctx context.Context) error {
	p := filepath.Join(s.dir, SlowFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %q is not a duration", p, strings.TrimSpace(string(b)))
	}
	if err := atomicfile.Write(filepath.Join(s.dir, WaitingFile), nil, 0o600); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the create was cancelled while the simulated cloud was slow (%s), and made nothing: %w", SlowFile, ctx.Err())
	}
}
