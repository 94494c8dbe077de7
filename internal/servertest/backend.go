package servertest

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/rezuscloud/rezuscloud/backend"
)

// Backend is the state backend and the API (a backend.Server) serving in
// the test's own process, for tests and benchmarks that drive tofu or the
// reconciler themselves.
type Backend struct {
	*backend.Server
	cancel context.CancelFunc
	served chan error
}

// OpenBackend serves cfg's server on 127.0.0.1:0 (unless cfg.Listen names
// an address) until Close. setup, when not nil, mounts what the server
// serves besides the API (the dashboard, machine logs) before it serves.
func OpenBackend(cfg backend.Config, setup func(*backend.Server) error) (*Backend, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("servertest: a backend needs a data dir")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	srv, err := backend.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	if setup != nil {
		if err := setup(srv); err != nil {
			srv.Close()
			return nil, err
		}
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{Server: srv, cancel: cancel, served: make(chan error, 1)}
	go func() { b.served <- srv.Run(ctx) }()
	return b, nil
}

// Close stops the server and returns what its Run returned. It may be
// called more than once.
func (b *Backend) Close() error {
	b.cancel()
	err := <-b.served
	b.served <- err
	return err
}

// StartBackend is OpenBackend for a test, in a data dir of the test's
// unless cfg names one: the server serves until the test ends, and an
// error of its Run then fails the test.
func StartBackend(tb TB, cfg backend.Config, setup func(*backend.Server) error) *backend.Server {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(tb.TempDir(), "data")
	}
	b, err := OpenBackend(cfg, setup)
	if err != nil {
		tb.Fatalf("state backend: %v", err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Fatalf("state backend: %v", err)
		}
	})
	return b.Server
}
