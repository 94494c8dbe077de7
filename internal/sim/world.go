package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"time"
)

// ErrNoSimDir is returned, wrapped, by OpenExisting for a directory that
// holds no simulated cloud.
var ErrNoSimDir = errors.New("not a sim dir")

// OpenExisting returns the store in dir as Open does, but never makes
// one: a directory without the cloud's settings (sim.json), or none at
// all, gives an error wrapping ErrNoSimDir. A process that uses a cloud
// another process serves opens it so, and a mistyped path cannot start a
// cloud of its own that no node host serves.
func OpenExisting(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open machine store: no directory given")
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoSimDir, dir)
	case err != nil:
		return nil, fmt.Errorf("open machine store: %w", err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNoSimDir, dir)
	}
	s := &Store{dir: dir}
	if s.block, err = s.readConfig(); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s holds no %s", ErrNoSimDir, dir, configFile)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Served reports whether a live process holds the claim address of the
// store's block (Block.ClaimAddr), as the Talos node host that serves the
// store's machines does for its lifetime. It connects to the address and
// never binds it, so that it cannot take the block from a host that is
// starting.
func (s *Store) Served() bool {
	c, err := net.DialTimeout("tcp4", s.block.ClaimAddr().String(), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
