package backend

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/store"
)

// LastUsedResolution is how often, at most, the last use of one token is
// written to the store: a use within it of the last one written is kept in
// memory only.
const LastUsedResolution = time.Minute

// DefaultLastUsedFlush is how often the server writes the last uses of
// tokens that changed to the store.
const DefaultLastUsedFlush = 15 * time.Second

// lastUsedPrefix is where the last uses of the file's tokens live in the
// store's series area, one key per token name: bytes that take no
// revision and never reach the event log, shared by the replicas of one
// store and kept through a restart.
const lastUsedPrefix = "tokens/lastUsed/"

// tokenUsage is what this process saw of the use of the file's tokens.
// note runs on every authenticated request and only touches memory; the
// flusher takes what changed to the store.
type tokenUsage struct {
	mu sync.Mutex
	// last is the latest use of each token that this process saw.
	last map[string]time.Time
	// written is the use last queued for the store, per token; pending
	// holds the queued ones that the flusher has not taken yet.
	written map[string]time.Time
	pending map[string]time.Time
}

func newTokenUsage() *tokenUsage {
	return &tokenUsage{last: map[string]time.Time{}, written: map[string]time.Time{}, pending: map[string]time.Time{}}
}

// note records a use of token name at now, and queues it for the store
// when the last queued one is LastUsedResolution old.
func (u *tokenUsage) note(name string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if now.After(u.last[name]) {
		u.last[name] = now
	}
	if w, ok := u.written[name]; !ok || now.Sub(w) >= LastUsedResolution {
		u.written[name] = now
		u.pending[name] = now
	}
}

// seen returns the latest use of token name this process saw.
func (u *tokenUsage) seen(name string) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last[name]
}

// take returns the queued uses and empties the queue.
func (u *tokenUsage) take() map[string]time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.pending
	u.pending = map[string]time.Time{}
	return p
}

// requeue puts back uses that could not be written, unless newer ones
// were queued meanwhile.
func (u *tokenUsage) requeue(p map[string]time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for name, at := range p {
		if at.After(u.pending[name]) {
			u.pending[name] = at
		}
	}
}

// storedLastUsed returns the last use of token name written to the store,
// or zero.
func storedLastUsed(tx store.Tx, name string) time.Time {
	b, err := tx.Series(lastUsedPrefix + name)
	if err != nil {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}
	}
	return at
}

// writeLastUsed writes the queued uses of t's file tokens to st, each
// only when it is later than what the store holds (another replica may
// have written a later one). On an error the uses stay queued.
func writeLastUsed(st store.Store, t *Tokens) error {
	p := t.used.take()
	if len(p) == 0 {
		return nil
	}
	err := st.Update(func(tx store.Tx) error {
		for name, at := range p {
			if !at.After(storedLastUsed(tx, name)) {
				continue
			}
			if err := tx.PutSeries(lastUsedPrefix+name, []byte(at.UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.used.requeue(p)
	}
	return err
}

// lastUsedFlusher writes the last uses of tokens to the store in the
// background, every interval and once more when it stops, so that
// requests never wait for the store.
type lastUsedFlusher struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startLastUsedFlusher starts writing t's last uses to st every interval.
func startLastUsedFlusher(st store.Store, t *Tokens, every time.Duration, log *slog.Logger) *lastUsedFlusher {
	f := &lastUsedFlusher{stop: make(chan struct{}), done: make(chan struct{})}
	flush := func() {
		if err := writeLastUsed(st, t); err != nil && !errors.Is(err, store.ErrFenced) {
			log.Warn("record the last use of tokens", "err", err)
		}
	}
	go func() {
		defer close(f.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				flush()
			case <-f.stop:
				flush()
				return
			}
		}
	}()
	return f
}

// Close writes what is queued and stops the flusher. The store must still
// be open.
func (f *lastUsedFlusher) Close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

// FlushLastUsed writes the queued last uses of tokens to the store now.
// Close does too; a replica of an etcd store calls it before it gives up
// its lease, after which the store refuses its writes.
func (s *Server) FlushLastUsed() error { return writeLastUsed(s.store, s.tokens) }
