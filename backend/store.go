package backend

import (
	"encoding/binary"
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
// global resourceVersion sequence is bucketMeta's sequence. The event log,
// bucketEvents, holds the most recent resource changes keyed by their
// resourceVersion (8 bytes, big endian); bucketMeta's keyEventsFrom says
// from where on it is complete. The tenant index, bucketTenants, has a key
// for every object that belongs to a tenant (see tenantKey).
var (
	bucketMeta      = []byte("meta")
	bucketResources = []byte("resources")
	bucketStates    = []byte("tfstate")
	bucketLocks     = []byte("locks")
	bucketEvents    = []byte("events")
	bucketTenants   = []byte("tenants")

	keyFormat     = []byte("format")
	keyEventsFrom = []byte("eventsFrom")
)

// DefaultEventHistory is how many resource changes the event log keeps
// unless StoreOptions.EventHistory says otherwise.
const DefaultEventHistory = 10000

// storeFormat is written into the meta bucket of a new file. Open
// migrates files of format "1" (API objects without their resourceVersion
// inside, no tenant index; see migrate.go) and refuses any other format
// rather than misreading it.
const storeFormat = "2"

// StoreOptions tunes Open. The zero value selects the defaults.
type StoreOptions struct {
	// OpenTimeout bounds the wait for the file lock that keeps a second
	// process from opening the same store. Default 5s.
	OpenTimeout time.Duration
	// EventHistory is how many of the latest resource changes the event
	// log keeps, so that watches resume across a restart (see
	// Tx.Events). Default DefaultEventHistory.
	EventHistory int
	// Now is the clock that stamps createdAt and updatedAt (in UTC).
	// Default time.Now; tests fix it.
	Now func() time.Time
}

// Store is the server's durable state: one bbolt file in the data dir. All
// access goes through View and Update; Open and Close are explicit. A Store
// is safe for concurrent use.
type Store struct {
	db           *bolt.DB
	path         string
	eventHistory int
	now          func() time.Time

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
	history := opts.EventHistory
	if history <= 0 {
		history = DefaultEventHistory
	}
	path, err := privateDataDir(dir)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
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
		FreelistType:   bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: another process holds it open", path)
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

// prepareFile creates the store's buckets in a new file and migrates one
// of an older format.
func prepareFile(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	for _, name := range [][]byte{bucketResources, bucketStates, bucketLocks, bucketTenants} {
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
	case string(f) != storeFormat:
		return fmt.Errorf("file format %q, this build reads %q (and migrates \"1\")", f, storeFormat)
	}
	return nil
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
	now     func() time.Time
	changes []Change
}

// View runs fn in a read-only transaction. Many can run at once.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(btx *bolt.Tx) error {
		return fn(&Tx{tx: btx, now: s.now})
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

// The event log. Update appends every change it commits to bucketEvents in
// the same transaction and trims the log to the store's EventHistory, so
// the log always holds every change with a resourceVersion above
// keyEventsFrom. An event hub reloads it when the server starts, which lets
// a watch resume from a resourceVersion given out before a restart.
//
// A logged change is: one byte of type ('A', 'M' or 'D'), the kind and the
// name each as a uvarint length and bytes, then the object's JSON.

// openEventLog creates the event log of a new or older store file. When
// resources changed without being logged (a file written before the log
// existed), the log starts over at the current resourceVersion.
func openEventLog(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	events, err := tx.CreateBucketIfNotExists(bucketEvents)
	if err != nil {
		return err
	}
	seq := meta.Sequence()
	from := uint64(0)
	if v := meta.Get(keyEventsFrom); len(v) == 8 {
		from = binary.BigEndian.Uint64(v)
	} else if v != nil || seq > 0 {
		from = seq
	}
	last := from
	if k, _ := events.Cursor().Last(); k != nil && binary.BigEndian.Uint64(k) > last {
		last = binary.BigEndian.Uint64(k)
	}
	if last < seq {
		// Changes between last and seq are missing: nobody can resume
		// from before seq.
		from = seq
	}
	if err := trimEvents(events, from); err != nil {
		return err
	}
	return meta.Put(keyEventsFrom, binary.BigEndian.AppendUint64(nil, from))
}

// logChanges appends the transaction's changes to the event log and trims
// it to history changes.
func (tx *Tx) logChanges(history int) error {
	if len(tx.changes) == 0 {
		return nil
	}
	events := tx.tx.Bucket(bucketEvents)
	for _, c := range tx.changes {
		// bbolt keeps the value until the commit: one buffer each.
		if err := events.Put(eventKey(c.Resource.ResourceVersion), encodeChange(c)); err != nil {
			return fmt.Errorf("log %s %q: %w", c.Resource.Kind, c.Resource.Name, err)
		}
	}
	seq := tx.ResourceVersion()
	if seq <= uint64(history) {
		return nil
	}
	from := seq - uint64(history)
	meta := tx.tx.Bucket(bucketMeta)
	if v := meta.Get(keyEventsFrom); len(v) == 8 && binary.BigEndian.Uint64(v) >= from {
		return nil
	}
	if err := trimEvents(events, from); err != nil {
		return err
	}
	return meta.Put(keyEventsFrom, binary.BigEndian.AppendUint64(nil, from))
}

// trimEvents deletes the logged changes up to and including from.
func trimEvents(events *bolt.Bucket, from uint64) error {
	var old [][]byte
	c := events.Cursor()
	for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= from; k, _ = c.Next() {
		old = append(old, k)
	}
	for _, k := range old {
		if err := events.Delete(k); err != nil {
			return fmt.Errorf("trim event log: %w", err)
		}
	}
	return nil
}

// EventsFrom returns the resourceVersion above which the event log holds
// every change: Events(after) is complete for any after at or above it.
func (tx *Tx) EventsFrom() uint64 {
	v := tx.tx.Bucket(bucketMeta).Get(keyEventsFrom)
	if len(v) != 8 {
		return tx.ResourceVersion()
	}
	return binary.BigEndian.Uint64(v)
}

// Events calls fn with each logged change whose resourceVersion is above
// after, oldest first, until fn returns an error. Changes of every kind are
// logged, internal ones included; a change's Object is valid only inside
// the transaction.
func (tx *Tx) Events(after uint64, fn func(Change) error) error {
	c := tx.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(eventKey(after + 1)); k != nil; k, v = c.Next() {
		ch, err := decodeChange(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return err
		}
		if err := fn(ch); err != nil {
			return err
		}
	}
	return nil
}

func eventKey(rv uint64) []byte { return binary.BigEndian.AppendUint64(nil, rv) }

var changeTypeCodes = map[EventType]byte{Added: 'A', Modified: 'M', Deleted: 'D'}

func encodeChange(c Change) []byte {
	r := c.Resource
	buf := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(r.Kind)+len(r.Name)+len(r.Object))
	buf = append(buf, changeTypeCodes[c.Type])
	buf = binary.AppendUvarint(buf, uint64(len(c.Resource.Kind)))
	buf = append(buf, c.Resource.Kind...)
	buf = binary.AppendUvarint(buf, uint64(len(c.Resource.Name)))
	buf = append(buf, c.Resource.Name...)
	return append(buf, c.Resource.Object...)
}

func decodeChange(rv uint64, v []byte) (Change, error) {
	bad := func(what string) (Change, error) {
		return Change{}, fmt.Errorf("event log entry %d: %s", rv, what)
	}
	if len(v) == 0 {
		return bad("empty")
	}
	var c Change
	switch v[0] {
	case 'A':
		c.Type = Added
	case 'M':
		c.Type = Modified
	case 'D':
		c.Type = Deleted
	default:
		return bad(fmt.Sprintf("unknown change type %q", v[0]))
	}
	rest := v[1:]
	field := func() (string, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", false
		}
		s := string(rest[w : w+int(n)])
		rest = rest[w+int(n):]
		return s, true
	}
	var ok bool
	if c.Resource.Kind, ok = field(); !ok {
		return bad("truncated kind")
	}
	if c.Resource.Name, ok = field(); !ok {
		return bad("truncated name")
	}
	c.Resource.ResourceVersion = rv
	c.Resource.Object = rest
	if c.Resource.Kind == "" || c.Resource.Name == "" {
		return bad("no kind or name")
	}
	return c, nil
}
