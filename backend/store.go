package backend

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DBFile is the name of the store's file inside the data dir.
const DBFile = "rezuscloud.db"

// Top-level buckets. Resources live under bucketResources/KIND/NAME, TF
// states under bucketStates/NAME, locks under bucketLocks/NAME, and the
// global resourceVersion sequence is bucketMeta's sequence.
var (
	bucketMeta      = []byte("meta")
	bucketResources = []byte("resources")
	bucketStates    = []byte("tfstate")
	bucketLocks     = []byte("locks")

	keyFormat = []byte("format")
)

// storeFormat is written into the meta bucket of a new file. Open refuses
// files of another format rather than misreading them.
const storeFormat = "1"

// StoreOptions tunes Open. The zero value selects the defaults.
type StoreOptions struct {
	// OpenTimeout bounds the wait for the file lock that keeps a second
	// process from opening the same store. Default 5s.
	OpenTimeout time.Duration
}

// Store is the server's durable state: one bbolt file in the data dir. All
// access goes through View and Update; Open and Close are explicit. A Store
// is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string

	// commitMu serialises write transactions together with the commit
	// hooks they trigger, so hooks see changes in commit order.
	commitMu sync.Mutex
	hooksMu  sync.RWMutex
	hooks    []func([]Change)
}

// Open opens (creating if needed) the store in dir. The dir is created with
// mode 0700, and an existing empty dir is set to 0700; a dir with contents
// that group or others may read is refused, because the store and the tofu
// work dirs beside it hold cluster keys. The file is created with mode
// 0600.
func Open(dir string, opts *StoreOptions) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open store: no data dir given")
	}
	if opts == nil {
		opts = &StoreOptions{}
	}
	timeout := opts.OpenTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open store: create data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open store: data dir %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && isEmptyDir(dir) {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	} else if perm&0o077 != 0 {
		return nil, fmt.Errorf("open store: data dir %s has mode %04o, want 0700 (it holds cluster keys): run chmod 700 %s", dir, perm, dir)
	}
	path := filepath.Join(dir, DBFile)
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: timeout,
		// Large states are written as one value each; a big initial
		// mapping saves remapping the file while it grows.
		InitialMmapSize: 256 << 20,
		// As etcd does: the freelist is not written on every commit but
		// rebuilt when the file is opened.
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: another process holds it open", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch f := meta.Get(keyFormat); {
		case f == nil:
			if err := meta.Put(keyFormat, []byte(storeFormat)); err != nil {
				return err
			}
		case string(f) != storeFormat:
			return fmt.Errorf("file format %q, this build reads %q", f, storeFormat)
		}
		for _, name := range [][]byte{bucketResources, bucketStates, bucketLocks} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// Path returns the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the file. Transactions still running finish first.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Tx is a transaction on the store, valid only inside the View or Update
// closure it was passed to.
type Tx struct {
	tx      *bolt.Tx
	changes []Change
}

// View runs fn in a read-only transaction. Many can run at once.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(btx *bolt.Tx) error {
		return fn(&Tx{tx: btx})
	})
}

// Update runs fn in a read-write transaction: one at a time, committed
// (and synced to disk) when fn returns nil, rolled back when it returns an
// error. After a commit that changed resources, the commit hooks get the
// changes before Update returns.
func (s *Store) Update(fn func(*Tx) error) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	var tx *Tx
	err := s.db.Update(func(btx *bolt.Tx) error {
		tx = &Tx{tx: btx}
		return fn(tx)
	})
	if err != nil || len(tx.changes) == 0 {
		return err
	}
	s.hooksMu.RLock()
	hooks := s.hooks
	s.hooksMu.RUnlock()
	for _, h := range hooks {
		h(tx.changes)
	}
	return nil
}

// OnCommit registers fn to be called after every committed Update that
// changed resources, with the changes in the order they were made. Hooks
// run in commit order while the next Update waits, so they must be quick:
// an event hub copies the changes to its subscribers and returns.
func (s *Store) OnCommit(fn func([]Change)) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.hooks = append(s.hooks[:len(s.hooks):len(s.hooks)], fn)
}

func isEmptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}
