package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rezuscloud/rezuscloud/store"
)

// Defaults of Config.
const (
	defaultCompactInterval = 5 * time.Minute
	// defaultMaxTxnOps is etcd's own default of --max-txn-ops.
	defaultMaxTxnOps = 128
	// maxAttempts bounds how often an Update runs again because another
	// commit came first.
	maxAttempts = 100
	// opTimeout bounds one request to etcd.
	opTimeout = 30 * time.Second
)

// ErrClosed says the store was closed.
var ErrClosed = errors.New("the store is closed")

// Store is an open store on etcd: an image of the store in memory, kept
// current by a watch of the store's keys, which View reads and Update
// changes through etcd transactions. It is safe for concurrent use.
type Store struct {
	cli          *clientv3.Client
	prefix       string
	history      int
	maxOps       int
	compactEvery time.Duration
	now          func() time.Time
	log          *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// closeMu lets transactions finish before Close; writeMu makes this
	// process's Updates one at a time.
	closeMu sync.RWMutex
	closed  bool
	writeMu sync.Mutex

	// mu guards what follows, and the cloning of img's trees.
	mu sync.Mutex
	// img is the latest image; hooked the etcd revision up to which the
	// commit hooks were called; changed is closed when hooked moves.
	img     *image
	hooked  int64
	changed chan struct{}
	// fenceKey and fenceRev are the fence every commit compares (see
	// SetFence); lease is the lease locks are bound to.
	fenceKey string
	fenceRev int64
	lease    clientv3.LeaseID

	hooksMu sync.RWMutex
	hooks   []func([]store.Change)

	// fresh holds the bytes of blobs this store's commits just wrote, by
	// blob ID, so that its watch need not read them back.
	fresh sync.Map
}

var _ store.Store = (*Store)(nil)

// Open opens the store under cfg.Prefix, creating it when the prefix
// holds nothing yet: it reads the store's keys into memory and starts the
// watch that keeps them current, and the compaction of etcd's history.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("open etcd store: no client")
	}
	if cfg.Prefix == "" {
		return nil, errors.New("open etcd store: no key prefix")
	}
	s := &Store{
		cli: cfg.Client, prefix: cfg.Prefix, history: cfg.EventHistory, maxOps: cfg.MaxTxnOps,
		compactEvery: cfg.CompactInterval, now: cfg.Now, log: cfg.Logger, changed: make(chan struct{}),
	}
	if s.history <= 0 {
		s.history = store.DefaultEventHistory
	}
	if s.maxOps <= 0 {
		s.maxOps = defaultMaxTxnOps
	}
	if s.compactEvery == 0 {
		s.compactEvery = defaultCompactInterval
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	im, err := s.load(ctx)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("open etcd store %s: %w", s.prefix, err)
	}
	s.img, s.hooked = im, im.etcdRev
	s.wg.Go(s.follow)
	if s.compactEvery > 0 {
		s.wg.Go(s.compactLoop)
	}
	return s, nil
}

// Close stops the store's watch and compaction. Transactions still
// running finish first. It does not close the client.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	s.wg.Wait()
	return nil
}

// SetFence makes every later commit conditional on the etcd key key
// having been created at createRevision: a replica's membership key,
// bound to its lease. When the key is gone or was made anew, Update
// writes nothing and returns an error wrapping store.ErrFenced. An empty
// key clears the fence.
func (s *Store) SetFence(key string, createRevision int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenceKey, s.fenceRev = key, createRevision
}

// SetLockLease binds the state locks that later commits take to lease, so
// that a lock goes when its holder's lease ends; 0 takes locks without a
// lease.
func (s *Store) SetLockLease(lease clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease = lease
}

// snapshot returns the latest image.
func (s *Store) snapshot() *image {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.img
}

// cloneOf returns a copy of im that can be changed.
func (s *Store) cloneOf(im *image) *image {
	s.mu.Lock()
	defer s.mu.Unlock()
	return im.clone()
}

// View runs fn in a read-only transaction on the latest image. Many can
// run at once.
func (s *Store) View(fn func(store.Tx) error) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return fn(&Tx{s: s, img: s.snapshot(), now: s.now})
}

// Update runs fn in a read-write transaction on a copy of the latest
// image and commits what it wrote in one etcd transaction, conditional on
// no other commit having come between (by this replica or another) and on
// the fence. When another commit came between, Update waits until the
// image holds it and runs fn again. After a commit that changed
// resources, the commit hooks get the changes before Update returns.
func (s *Store) Update(fn func(store.Tx) error) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for attempt := 1; ; attempt++ {
		base := s.snapshot()
		tx := &Tx{
			s: s, img: s.cloneOf(base), base: base, now: s.now,
			dirty: map[string]bool{}, readLocks: map[string]int64{}, blobs: map[string][]byte{},
		}
		if err := fn(tx); err != nil {
			return err
		}
		if len(tx.dirty) == 0 {
			return nil
		}
		rev, err := s.commit(tx)
		var conflict *conflictError
		if errors.As(err, &conflict) && attempt == maxAttempts {
			return fmt.Errorf("update: %d commits in a row came first, the last %w", maxAttempts, err)
		}
		if errors.As(err, &conflict) {
			if err := s.waitRev(conflict.rev, true); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		return s.waitRev(rev, false)
	}
}

// OnCommit registers fn to be called after every commit that changed
// resources, this replica's and every other's, with the changes in the
// order they were made. Hooks run in commit order, in the store's watch,
// while this replica's next Update waits.
func (s *Store) OnCommit(fn func([]store.Change)) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.hooks = append(s.hooks[:len(s.hooks):len(s.hooks)], fn)
}

// runHooks calls the hooks with each commit's changes.
func (s *Store) runHooks(logs []commitLog) {
	if len(logs) == 0 {
		return
	}
	s.hooksMu.RLock()
	hooks := s.hooks
	s.hooksMu.RUnlock()
	for _, cl := range logs {
		for _, h := range hooks {
			h(cl.changes)
		}
	}
}

// waitRev waits until the image reflects etcd revision rev and the hooks
// of every commit up to it ran. ask asks etcd to tell the watch how far
// it is, for a revision that may have changed no key of the store.
func (s *Store) waitRev(rev int64, ask bool) error {
	for {
		s.mu.Lock()
		hooked, changed := s.hooked, s.changed
		s.mu.Unlock()
		if hooked >= rev {
			return nil
		}
		var tick <-chan time.Time
		if ask {
			_ = s.cli.RequestProgress(s.ctx)
			tick = time.After(100 * time.Millisecond)
		}
		select {
		case <-changed:
		case <-tick:
		case <-s.ctx.Done():
			return ErrClosed
		}
	}
}
