package report

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// Defaults of DispatcherOptions.
const (
	DefaultBuffer      = 1000
	DefaultMaxAttempts = 10
	DefaultMaxAge      = time.Hour
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 2 * time.Minute
	DefaultTimeout     = time.Minute
	// maxBatch bounds the statuses handed to one ReportAll.
	maxBatch = 100
)

// DispatcherOptions configures a Dispatcher. Zero values take the defaults.
type DispatcherOptions struct {
	// Buffer is how many statuses may wait per reporter, counting one per
	// (commit, context); when it is full the oldest is dropped.
	// DefaultBuffer when zero.
	Buffer int
	// MaxAttempts bounds the deliveries of one status; DefaultMaxAttempts
	// when zero.
	MaxAttempts int
	// MaxAge drops a status that is still not delivered this long after
	// it was sent; DefaultMaxAge when zero.
	MaxAge time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed delivery:
	// MinBackoff, doubling with each failure in a row, capped at
	// MaxBackoff, and never shorter than a Retry-After the forge asked
	// for. DefaultMinBackoff and DefaultMaxBackoff when zero.
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one delivery; DefaultTimeout when zero.
	Timeout time.Duration
	// Logger receives one line per failed delivery and per dropped
	// status; slog.Default() when nil.
	Logger *slog.Logger
}

// Dispatcher delivers statuses to reporters in the background, one
// goroutine per reporter, so that a slow or unreachable forge delays only
// its own statuses. Send never blocks. While a status waits, a newer one
// for the same commit and context replaces it, so a backlog holds at most
// one status per (reporter, commit, context) and never more than Buffer
// per reporter. A status equal to the one last delivered for its commit
// and context is not sent again, so the statuses of a whole commit may be
// sent at every phase change and only what changed goes out. A delivery that fails for a reason that may pass (network,
// 5xx, 408, 429, a rate limit) is retried after a backoff; one that cannot
// succeed (any other 4xx, a malformed status) is logged and dropped.
//
// A reporter that also has a method ReportAll(ctx, []Status) error (as
// GitNotes does) gets every waiting status in one call.
type Dispatcher struct {
	opts    DispatcherOptions
	backoff backoff.Policy // of MinBackoff and MaxBackoff, without jitter
	log     *slog.Logger
	workers []*worker
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    chan struct{}
	closing sync.Once
	closed  atomic.Bool

	sent, unchanged, delivered, coalesced, retries, failed, overflowed, abandoned atomic.Int64
}

// batchReporter is a Reporter that delivers many statuses at once.
type batchReporter interface {
	ReportAll(ctx context.Context, ss []Status) error
}

// NewDispatcher starts delivering to reps. Close stops it.
func NewDispatcher(reps []Reporter, opts DispatcherOptions) *Dispatcher {
	opts.Buffer = cmp.Or(max(opts.Buffer, 0), DefaultBuffer)
	opts.MaxAttempts = cmp.Or(max(opts.MaxAttempts, 0), DefaultMaxAttempts)
	opts.MaxAge = cmp.Or(max(opts.MaxAge, 0), DefaultMaxAge)
	opts.MinBackoff = cmp.Or(max(opts.MinBackoff, 0), DefaultMinBackoff)
	opts.MaxBackoff = max(cmp.Or(max(opts.MaxBackoff, 0), DefaultMaxBackoff), opts.MinBackoff)
	opts.Timeout = cmp.Or(max(opts.Timeout, 0), DefaultTimeout)
	d := &Dispatcher{opts: opts, backoff: backoff.Policy{Base: opts.MinBackoff, Max: opts.MaxBackoff},
		log: cmp.Or(opts.Logger, slog.Default()), done: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, r := range reps {
		w := &worker{d: d, rep: r, pending: map[key]*item{}, last: map[key]Status{}, wake: make(chan struct{}, 1),
			log: d.log.With("reporter", r.Name())}
		w.batch, _ = r.(batchReporter)
		d.workers = append(d.workers, w)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			w.run()
		}()
	}
	go func() {
		d.wg.Wait()
		close(d.done)
	}()
	return d
}

// Send queues statuses for every reporter and returns at once. A status
// that is malformed (no full sha, a multi-line context, an unknown state)
// is logged and dropped, and so is everything sent after Close. A nil
// Dispatcher (no reporter configured) drops everything silently.
func (d *Dispatcher) Send(ss ...Status) {
	if d == nil {
		return
	}
	if d.closed.Load() {
		if len(ss) > 0 {
			d.log.Warn("status reports sent after the dispatcher closed are dropped", "count", len(ss))
		}
		return
	}
	now := time.Now()
	for _, s := range ss {
		if err := s.validate(); err != nil {
			d.log.Error("status report dropped", "err", err)
			continue
		}
		s.Description = truncate(s.Description, MaxDescription)
		for _, w := range d.workers {
			d.sent.Add(1)
			w.add(s, now)
		}
	}
}

// Close stops accepting statuses and waits until every waiting status is
// delivered or dropped, or until ctx is done; then it cancels the
// deliveries in flight and returns an error that says how many statuses
// were not delivered.
func (d *Dispatcher) Close(ctx context.Context) error {
	if d == nil {
		return nil
	}
	d.closing.Do(func() {
		d.closed.Store(true)
		for _, w := range d.workers {
			w.mu.Lock()
			w.closing = true
			w.mu.Unlock()
			w.signal()
		}
	})
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
	}
	d.cancel()
	<-d.done
	n := 0
	for _, w := range d.workers {
		w.mu.Lock()
		n += len(w.pending)
		w.pending = map[key]*item{}
		w.mu.Unlock()
	}
	if n == 0 {
		return nil
	}
	d.abandoned.Add(int64(n))
	return fmt.Errorf("status reports: %d not delivered before the deadline: %w", n, ctx.Err())
}

// DispatcherStats counts what a Dispatcher did, over all its reporters;
// each status counts once per reporter.
type DispatcherStats struct {
	// Sent counts statuses accepted by Send.
	Sent int64
	// Delivered counts statuses a reporter took.
	Delivered int64
	// Coalesced counts statuses replaced by a newer one for the same
	// commit and context before they were delivered.
	Coalesced int64
	// Retries counts deliveries tried again after a failure.
	Retries int64
	// Failed counts statuses dropped after a permanent error or when
	// their attempts or age ran out.
	Failed int64
	// Overflowed counts statuses dropped because the buffer was full.
	Overflowed int64
	// Abandoned counts statuses still waiting when Close gave up.
	Abandoned int64
	// Unchanged counts statuses not sent because the reporter took the
	// very same one (state, description, target URL) last.
	Unchanged int64
	// Pending is how many statuses wait now.
	Pending int
}

// Stats returns the counts so far.
func (d *Dispatcher) Stats() DispatcherStats {
	if d == nil {
		return DispatcherStats{}
	}
	s := DispatcherStats{
		Sent: d.sent.Load(), Delivered: d.delivered.Load(), Coalesced: d.coalesced.Load(),
		Retries: d.retries.Load(), Failed: d.failed.Load(), Overflowed: d.overflowed.Load(),
		Abandoned: d.abandoned.Load(), Unchanged: d.unchanged.Load(),
	}
	for _, w := range d.workers {
		w.mu.Lock()
		s.Pending += len(w.pending)
		w.mu.Unlock()
	}
	return s
}

type key struct{ sha, context string }

// item is a status waiting for one reporter.
type item struct {
	s        Status
	sent     time.Time // when Send took this status
	seq      uint64    // order of arrival
	attempts int
}

// worker delivers to one reporter.
type worker struct {
	d     *Dispatcher
	rep   Reporter
	batch batchReporter
	log   *slog.Logger
	wake  chan struct{}

	mu        sync.Mutex
	pending   map[key]*item
	last      map[key]Status // delivered last, for at most maxRemembered keys
	lastOrder []key          // keys of last, oldest first
	seq       uint64
	holdUntil time.Time // no delivery before, after a failure
	failures  int       // failed deliveries in a row
	closing   bool
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) add(s Status, now time.Time) {
	w.mu.Lock()
	if w.closing {
		// Close got here first; the worker may be gone.
		w.mu.Unlock()
		w.log.Warn("status report sent after the dispatcher closed is dropped", "sha", s.SHA, "context", s.Context)
		return
	}
	k := key{s.SHA, s.Context}
	if _, waiting := w.pending[k]; !waiting {
		if last, ok := w.last[k]; ok && last == s {
			w.d.unchanged.Add(1)
			w.mu.Unlock()
			return
		}
	}
	if old := w.pending[k]; old != nil {
		// The newer status takes the older one's place in line, so that a
		// context updated often is not pushed back every time.
		w.d.coalesced.Add(1)
		old.s, old.sent, old.attempts = s, now, 0
		w.mu.Unlock()
		w.signal()
		return
	}
	w.seq++
	if len(w.pending) >= w.d.opts.Buffer {
		oldest := w.oldest()
		delete(w.pending, key{oldest.s.SHA, oldest.s.Context})
		w.d.overflowed.Add(1)
		w.log.Warn("status report dropped: too many waiting", "sha", oldest.s.SHA, "context", oldest.s.Context,
			"buffer", w.d.opts.Buffer)
	}
	w.pending[k] = &item{s: s, sent: now, seq: w.seq}
	w.mu.Unlock()
	w.signal()
}

// oldest is the waiting item that arrived first. The caller holds mu and
// pending is not empty.
func (w *worker) oldest() *item {
	var first *item
	for _, it := range w.pending {
		if first == nil || it.seq < first.seq {
			first = it
		}
	}
	return first
}

// take removes and returns what to deliver next: the oldest item, or for
// a batch reporter up to maxBatch items in order of arrival.
func (w *worker) take() []*item {
	if w.batch == nil {
		it := w.oldest()
		delete(w.pending, key{it.s.SHA, it.s.Context})
		return []*item{it}
	}
	items := make([]*item, 0, min(len(w.pending), maxBatch))
	for _, it := range w.pending {
		items = append(items, it)
	}
	slices.SortFunc(items, func(a, b *item) int { return cmp.Compare(a.seq, b.seq) })
	if len(items) > maxBatch {
		items = items[:maxBatch]
	}
	for _, it := range items {
		delete(w.pending, key{it.s.SHA, it.s.Context})
	}
	return items
}

func (w *worker) run() {
	for {
		items, ok := w.next()
		if !ok {
			return
		}
		w.deliver(items)
	}
}

// next waits until there is something to deliver and no backoff holds it
// back. It reports false when the worker should stop: the dispatcher was
// cancelled, or it is closing and nothing waits.
func (w *worker) next() ([]*item, bool) {
	for {
		if w.d.ctx.Err() != nil {
			return nil, false
		}
		w.mu.Lock()
		n, closing, hold := len(w.pending), w.closing, time.Until(w.holdUntil)
		if n > 0 && hold <= 0 {
			items := w.take()
			w.mu.Unlock()
			return items, true
		}
		w.mu.Unlock()
		if n == 0 && closing {
			return nil, false
		}
		var timer *time.Timer
		var expired <-chan time.Time
		if n > 0 {
			timer = time.NewTimer(hold)
			expired = timer.C
		}
		select {
		case <-w.wake:
		case <-expired:
		case <-w.d.ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (w *worker) deliver(items []*item) {
	ctx, cancel := context.WithTimeout(w.d.ctx, w.d.opts.Timeout)
	var err error
	if w.batch != nil {
		ss := make([]Status, len(items))
		for i, it := range items {
			ss[i] = it.s
		}
		err = w.batch.ReportAll(ctx, ss)
	} else {
		err = w.rep.Report(ctx, items[0].s)
	}
	cancel()

	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.failures = 0
		w.holdUntil = time.Time{}
		w.d.delivered.Add(int64(len(items)))
		for _, it := range items {
			w.remember(it.s)
		}
		return
	}
	if w.d.ctx.Err() != nil {
		// Close gave up: the items count as abandoned, not failed.
		for _, it := range items {
			w.requeue(it)
		}
		return
	}
	if errors.Is(err, ErrPermanent) {
		w.d.failed.Add(int64(len(items)))
		w.log.Error("status report failed; not retrying", "sha", items[0].s.SHA, "context", items[0].s.Context,
			"statuses", len(items), "err", err)
		return
	}
	w.failures++
	wait := max(w.d.backoff.Delay(w.failures), retryDelay(err))
	w.holdUntil = time.Now().Add(wait)
	now := time.Now()
	retried, dropped := 0, 0
	for _, it := range items {
		it.attempts++
		if it.attempts >= w.d.opts.MaxAttempts || now.Add(wait).Sub(it.sent) > w.d.opts.MaxAge {
			dropped++
			w.d.failed.Add(1)
			w.log.Error("status report dropped after failed attempts", "sha", it.s.SHA, "context", it.s.Context,
				"attempts", it.attempts, "age", now.Sub(it.sent).Round(time.Millisecond), "err", err)
			continue
		}
		if w.requeue(it) {
			retried++
			w.d.retries.Add(1)
		}
	}
	if retried > 0 {
		w.log.Warn("status report failed; retrying", "sha", items[0].s.SHA, "context", items[0].s.Context,
			"statuses", retried, "retry_in", wait, "err", err)
	}
}

// maxRemembered bounds how many delivered statuses a worker remembers to
// skip sending them again.
const maxRemembered = 4096

// remember records s as delivered. The caller holds mu.
func (w *worker) remember(s Status) {
	k := key{s.SHA, s.Context}
	if _, ok := w.last[k]; !ok {
		w.lastOrder = append(w.lastOrder, k)
		if len(w.lastOrder) > maxRemembered {
			delete(w.last, w.lastOrder[0])
			w.lastOrder = w.lastOrder[1:]
		}
	}
	w.last[k] = s
}

// requeue puts an item back unless a newer status for its commit and
// context arrived meanwhile, or the buffer filled up with newer statuses
// (then the item, the oldest, is dropped). The caller holds mu.
func (w *worker) requeue(it *item) bool {
	k := key{it.s.SHA, it.s.Context}
	if _, newer := w.pending[k]; newer {
		w.d.coalesced.Add(1)
		return false
	}
	if len(w.pending) >= w.d.opts.Buffer {
		w.d.overflowed.Add(1)
		w.log.Warn("status report dropped: too many waiting", "sha", it.s.SHA, "context", it.s.Context,
			"buffer", w.d.opts.Buffer)
		return false
	}
	w.pending[k] = it
	return true
}
