package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/rezuscloud/rezuscloud/store"
)

// DBFile is the name of the store's file inside the data dir.
const DBFile = "rezuscloud.db"

// Top-level buckets. Resources live under bucketResources/KIND/NAME, TF
// states under bucketStates/NAME, locks under bucketLocks/NAME, and the
// global resourceVersion sequence is bucketMeta's sequence. The event log,
// bucketEvents, holds the most recent resource changes keyed by their
// resourceVersion (8 bytes, big endian); bucketMeta's keyEventsFrom says
// from where on it is complete. The tenant index, bucketTenants, has a key
// for every object that belongs to a tenant (see tenantKey). The series
// area, bucketSeries, holds unlogged bytes by key (see series.go).
var (
	bucketMeta      = []byte("meta")
	bucketResources = []byte("resources")
	bucketStates    = []byte("tfstate")
	bucketLocks     = []byte("locks")
	bucketEvents    = []byte("events")
	bucketTenants   = []byte("tenants")
	bucketSeries    = []byte("series")

	keyFormat     = []byte("format")
	keyEventsFrom = []byte("eventsFrom")
)

// storeFormat is written into the meta bucket of a new file. Open
// migrates files of format "1" (API objects without their resourceVersion
// inside, no tenant index; see migrate.go) and refuses any other format
// rather than misreading it.
const storeFormat = "2"

// Options tunes Open. The zero value selects the defaults.
type Options struct {
	// OpenTimeout bounds the wait for the file lock that keeps a second
	// process from opening the same store. Default 5s.
	OpenTimeout time.Duration
	// EventHistory is how many of the latest resource changes the event
	// log keeps, so that watches resume across a restart (see
	// Tx.Events). Default store.DefaultEventHistory.
	EventHistory int
	// Now is the clock that stamps createdAt and updatedAt (in UTC).
	// Default time.Now; tests fix it.
	Now func() time.Time
}

// Store is the server's durable state: one bbolt file in the data dir. All
// access goes through View and Update; Open and Close are explicit. A Store
// is safe for concurrent use.
type Store struct {
	db           *bbolt.DB
	path         string
	eventHistory int
	now          func() time.Time

	// commitMu serialises write transactions together with the commit
	// hooks they trigger, so hooks see changes in commit order.
	commitMu sync.Mutex
	hooksMu  sync.RWMutex
	hooks    []func([]store.Change)
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir. The dir is created with
// mode 0700, and an existing empty dir is set to 0700; a dir with contents
// that group or others may read is refused, because the store and the tofu
// work dirs beside it hold cluster keys. The file is created with mode
// 0600.
func Open(dir string, opts *Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open store: no data dir given")
	}
	if opts == nil {
		opts = &Options{}
	}
	timeout := opts.OpenTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	history := opts.EventHistory
	if history <= 0 {
		history = store.DefaultEventHistory
	}
	path, err := privateDataDir(dir)
	if err != nil {
		return nil, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout: timeout,
		// Large states are written as one value each; a big initial
		// mapping saves remapping the file while it grows.
		InitialMmapSize: 256 << 20,
		// The freelist is not written with each commit: a commit would
		// write every free page's id, and a store whose states churned
		// has tens of thousands (56,771 in the 450 MB file of 1,000
		// tenants × 8 machines, where a small write took 20 ms with the
		// freelist and 1.2 ms without). Open rebuilds it instead, by
		// walking the file once; the pages it read stay in the page cache
		// but leave the server's RSS (ReleaseMapped below).
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	})
	if errors.Is(err, bbolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: %w", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(prepareFile)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{db: db, path: path, eventHistory: history, now: now}
	// bbolt's walk of every page to rebuild the freelist mapped them
	// all; none is needed until read again.
	if err := s.ReleaseMapped(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return s, nil
}

// privateDataDir makes sure dir is the data dir: a directory of mode 0700
// (an empty one is made so, one with files of others refused), whose store
// file, if any, has mode 0600. It returns the store file's path.
func privateDataDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("open store: create data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("open store: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("open store: data dir %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && isEmptyDir(dir) {
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", fmt.Errorf("open store: %w", err)
		}
	} else if perm&0o077 != 0 {
		return "", fmt.Errorf("open store: data dir %s has mode %04o, want 0700 (it holds cluster keys): run chmod 700 %s", dir, perm, dir)
	}
	path := filepath.Join(dir, DBFile)
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return "", fmt.Errorf("open store: %w", err)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("open store: %w", err)
	}
	return path, nil
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

// prepareFile creates the store's buckets in a new file and migrates one
// of an older format.
func prepareFile(tx *bbolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	for _, name := range [][]byte{bucketResources, bucketStates, bucketLocks, bucketTenants, bucketSeries} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	if err := openEventLog(tx); err != nil {
		return err
	}
	switch f := meta.Get(keyFormat); {
	case f == nil:
		return meta.Put(keyFormat, []byte(storeFormat))
	case string(f) == "1":
		return migrateFormat1(tx)
	}
	return checkFormat(meta.Get(keyFormat))
}

// checkFormat refuses a file format this build does not read: it reads
// storeFormat and migrates "1".
func checkFormat(f []byte) error {
	if string(f) == storeFormat || string(f) == "1" {
		return nil
	}
	return fmt.Errorf("file format %q, this build reads %q (and migrates \"1\")", f, storeFormat)
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
// function it was passed to.
type Tx struct {
	tx      *bbolt.Tx
	now     func() time.Time
	changes []store.Change
}

var _ store.Tx = (*Tx)(nil)

// View runs fn in a read-only transaction. Many can run at once.
func (s *Store) View(fn func(store.Tx) error) error {
	return s.db.View(func(btx *bbolt.Tx) error {
		return fn(&Tx{tx: btx, now: s.now})
	})
}

// Update runs fn in a read-write transaction: one at a time, committed
// (and synced to disk) when fn returns nil, rolled back when it returns an
// error. After a commit that changed resources, the commit hooks get the
// changes before Update returns.
func (s *Store) Update(fn func(store.Tx) error) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	var tx *Tx
	err := s.db.Update(func(btx *bbolt.Tx) error {
		tx = &Tx{tx: btx, now: s.now}
		if err := fn(tx); err != nil {
			return err
		}
		return tx.logChanges(s.eventHistory)
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
func (s *Store) OnCommit(fn func([]store.Change)) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.hooks = append(s.hooks[:len(s.hooks):len(s.hooks)], fn)
}
