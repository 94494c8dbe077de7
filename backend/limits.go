package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// Defaults of the server's limits on connections and request bodies.
const (
	// DefaultBodyTimeout is how long a request body may take to arrive.
	DefaultBodyTimeout = 2 * time.Minute
	// DefaultIdleTimeout is how long a keep-alive connection may wait
	// for its next request.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultBodyMemory is the least budget of request-body bytes that
	// all requests together may hold; see Config.BodyMemory.
	DefaultBodyMemory = 256 << 20
)

// bodyChunk is the most one read of a request body takes from the budget
// before the bytes have arrived; what does not arrive is given back.
const bodyChunk = 64 << 10

// retryAfter is what a request refused for want of body budget is told to
// wait, in seconds.
const retryAfter = 5

// bodyLimits bounds what request bodies cost the server. Every body must
// arrive within timeout of the request's start, enforced as a read
// deadline on the connection; a client that sends too slowly gets 408 and
// its connection is closed. And all bodies being read share budget: a
// body takes from it the bytes it has actually received (so a request
// that announces 64 MiB and sends one byte costs one chunk), and gives
// them back when its request ends. A read that finds the budget spent
// waits for it until the body's deadline, then fails with 503 and
// Retry-After. Requests without a body, such as watches, are untouched:
// they have no deadline and may last for hours.
type bodyLimits struct {
	timeout time.Duration
	budget  *semaphore.Weighted
	size    int64
}

func newBodyLimits(timeout time.Duration, size int64) *bodyLimits {
	return &bodyLimits{timeout: timeout, budget: semaphore.NewWeighted(size), size: size}
}

// wrap applies the limits to every request next serves.
func (l *bodyLimits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &limitedBody{
			src:      r.Body,
			limits:   l,
			ctx:      r.Context(),
			header:   w.Header(),
			rc:       http.NewResponseController(w),
			deadline: time.Now().Add(l.timeout),
		}
		// Not every writer has a connection (tests' recorders); the
		// budget still holds there.
		b.rc.SetReadDeadline(b.deadline)
		defer b.release()
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// limitedBody is a request body under bodyLimits.
type limitedBody struct {
	src      io.ReadCloser
	limits   *bodyLimits
	ctx      context.Context
	header   http.Header
	rc       *http.ResponseController
	deadline time.Time

	got int64 // bytes received

	mu   sync.Mutex
	held int64 // bytes taken from the budget
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return b.src.Read(p)
	}
	p = p[:min(len(p), bodyChunk)]
	if err := b.take(int64(len(p))); err != nil {
		return 0, err
	}
	n, err := b.src.Read(p)
	b.got += int64(n)
	b.giveBack(int64(len(p) - n))
	switch {
	case errors.Is(err, io.EOF):
		// The body is in: the connection's later reads (the server's
		// check for a client that hangs up) must not time out.
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = api.Errorf(http.StatusRequestTimeout, "the request body did not arrive within %v (the server's --body-timeout); %d bytes came", b.limits.timeout, b.got)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.src.Close() }

// take reserves n bytes of the budget, waiting for them at most until the
// body's deadline.
func (b *limitedBody) take(n int64) error {
	l := b.limits
	if !l.budget.TryAcquire(n) {
		ctx, cancel := context.WithDeadline(b.ctx, b.deadline)
		err := l.budget.Acquire(ctx, n)
		cancel()
		if err != nil {
			b.header.Set("Retry-After", strconv.Itoa(retryAfter))
			return api.Errorf(http.StatusServiceUnavailable, "the server holds as many request body bytes as it may (%s, --body-memory) and none came free within %v; try again", mib(l.size), l.timeout)
		}
	}
	b.mu.Lock()
	b.held += n
	b.mu.Unlock()
	return nil
}

func (b *limitedBody) giveBack(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	b.limits.budget.Release(n)
}

// release gives back everything the body holds, when its request ends.
func (b *limitedBody) release() {
	b.mu.Lock()
	n := b.held
	b.held = 0
	b.mu.Unlock()
	if n > 0 {
		b.limits.budget.Release(n)
	}
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
