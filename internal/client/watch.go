package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// Event types of a watch.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
)

// AnnotationInitialEventsEnd marks the BOOKMARK that ends the current state
// a watch starts with.
const AnnotationInitialEventsEnd = "rezuscloud.io/initial-events-end"

// maxEventLine bounds one line of a watch.
const maxEventLine = 32 << 20

// Event is one line of a watch.
type Event struct {
	// Type is Added, Modified, Deleted or Bookmark.
	Type string
	// Object is the object as the server sent it.
	Object json.RawMessage
	// Meta is the start of Object: its kind and metadata.
	Meta ObjectHeader
	// Line is the whole line as the server sent it, without the newline.
	Line []byte
}

// InitialEnd reports whether the event is the BOOKMARK that ends the
// current state a fresh watch starts with.
func (e Event) InitialEnd() bool {
	return e.Type == Bookmark && e.Meta.Metadata.Annotations[AnnotationInitialEventsEnd] == "true"
}

// ObjectHeader is what every served object starts with.
type ObjectHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// WatchOptions configures Watch.
type WatchOptions struct {
	// LabelSelector filters the events by their objects' labels.
	LabelSelector string
	// ResourceVersion resumes after that resourceVersion: the stream
	// starts with the kept events above it. Empty starts with the current
	// state as ADDED events and a BOOKMARK that ends it.
	ResourceVersion string
	// MinBackoff and MaxBackoff bound the delay before a reconnection; it
	// doubles after each failed attempt. Defaults 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout ends a stream that sends nothing, not even a heartbeat,
	// for that long, and reconnects. Default 60s (the server sends a
	// heartbeat every 15s).
	IdleTimeout time.Duration
	// OnReconnect, when set, is called before each reconnection with the
	// reason and the delay.
	OnReconnect func(reason error, delay time.Duration)
}

// Watcher reads a watch. It reconnects by itself when the stream breaks,
// resuming after the last resourceVersion it saw, and gives up only on an
// answer that another attempt would not change (401, 403, 404, 400).
type Watcher struct {
	c    *Client
	path string
	opts WatchOptions
	ctx  context.Context

	body    io.ReadCloser
	scanner *bufio.Scanner
	idle    *time.Timer
	rv      string
	backoff backoff.Policy // of MinBackoff and MaxBackoff, without jitter
	fails   int            // attempts to reconnect since the last event

	mu     sync.Mutex
	closed bool
}

// Watch opens the watch at path: an events path (such as
// TenantEventsPath) or a list path, which is watched with ?watch=true.
// The first connection's failure is returned as it is; later ones are
// retried. The watch ends when ctx ends or Close is called.
func (c *Client) Watch(ctx context.Context, path string, opts WatchOptions) (*Watcher, error) {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(30*time.Second, opts.MinBackoff)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 60 * time.Second
	}
	w := &Watcher{c: c, path: path, opts: opts, ctx: ctx, rv: opts.ResourceVersion,
		backoff: backoff.Policy{Base: opts.MinBackoff, Max: opts.MaxBackoff}}
	if err := w.connect(); err != nil {
		return nil, err
	}
	return w, nil
}

// ResourceVersion returns the resourceVersion of the last event read, from
// which a later watch can resume.
func (w *Watcher) ResourceVersion() string { return w.rv }

func (w *Watcher) connect() error {
	q := url.Values{}
	if !strings.HasSuffix(w.path, "/events") {
		q.Set("watch", "true")
	}
	if w.rv != "" {
		q.Set("resourceVersion", w.rv)
	}
	if w.opts.LabelSelector != "" {
		q.Set("labelSelector", w.opts.LabelSelector)
	}
	resp, err := w.c.do(w.ctx, w.path, q, "application/json")
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		resp.Body.Close()
		return errClosed
	}
	w.body = resp.Body
	w.scanner = bufio.NewScanner(resp.Body)
	w.scanner.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	body := resp.Body
	w.idle = time.AfterFunc(w.opts.IdleTimeout, func() { body.Close() })
	return nil
}

// errClosed ends a watch that was closed.
var errClosed = errors.New("watch closed")

// drop closes the current stream.
func (w *Watcher) drop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle != nil {
		w.idle.Stop()
	}
	if w.body != nil {
		w.body.Close()
		w.body = nil
	}
}

// Close ends the watch; a Next blocked in a read returns.
func (w *Watcher) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.drop()
	return nil
}

func (w *Watcher) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// Next returns the next event, reconnecting as often as it must. It
// returns ctx's error once the context ends, and an error of its own when
// the watch was closed or the server refuses it for good.
func (w *Watcher) Next() (Event, error) {
	var reason error
	for {
		if err := w.ctx.Err(); err != nil {
			w.drop()
			return Event{}, err
		}
		if w.isClosed() {
			return Event{}, errClosed
		}
		if w.scanner != nil {
			ev, err := w.read()
			if err == nil {
				w.fails = 0
				return ev, nil
			}
			w.drop()
			w.scanner = nil
			var tooLong *lineError
			if errors.As(err, &tooLong) {
				return Event{}, err
			}
			reason = err
			continue
		}
		// A stream that ended after events reconnects after MinBackoff;
		// every further failure doubles the delay up to MaxBackoff.
		w.fails++
		if err := w.wait(reason, w.backoff.Delay(w.fails)); err != nil {
			return Event{}, err
		}
		err := w.connect()
		switch {
		case err == nil:
		case w.ctx.Err() != nil || w.isClosed():
		case Code(err) == http.StatusGone:
			// The history no longer reaches back to w.rv: start over
			// from the current state.
			w.rv = ""
			reason = err
		case !retryable(err):
			return Event{}, err
		default:
			reason = err
		}
	}
}

// retryable reports whether another attempt may succeed.
func retryable(err error) bool {
	if IsConn(err) {
		return true
	}
	switch Code(err) {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusInternalServerError:
		return true
	}
	return false
}

// wait reports a reconnection and sleeps for delay, or until the watch
// ends.
func (w *Watcher) wait(reason error, delay time.Duration) error {
	if w.opts.OnReconnect != nil {
		w.opts.OnReconnect(reason, delay)
	}
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-w.ctx.Done():
		return w.ctx.Err()
	case <-t.C:
		return nil
	}
}

type lineError struct{ err error }

func (e *lineError) Error() string { return e.err.Error() }

// read reads one event of the current stream.
func (w *Watcher) read() (Event, error) {
	for {
		if !w.scanner.Scan() {
			err := w.scanner.Err()
			if errors.Is(err, bufio.ErrTooLong) {
				return Event{}, &lineError{fmt.Errorf("watch %s: an event is longer than %d bytes", w.path, maxEventLine)}
			}
			if err == nil {
				err = io.EOF
			}
			return Event{}, &ConnError{Server: w.c.Server(), Err: fmt.Errorf("watch stream ended: %w", err)}
		}
		w.idle.Reset(w.opts.IdleTimeout)
		line := w.scanner.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var raw struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(line, &raw); err != nil {
			return Event{}, &ConnError{Server: w.c.Server(), Err: fmt.Errorf("watch %s: a line that is not an event: %v", w.path, err)}
		}
		ev := Event{Type: raw.Type, Object: raw.Object, Line: append([]byte(nil), line...)}
		if err := json.Unmarshal(raw.Object, &ev.Meta); err != nil {
			return Event{}, &ConnError{Server: w.c.Server(), Err: fmt.Errorf("watch %s: an event whose object is not an object: %v", w.path, err)}
		}
		if rv := ev.Meta.Metadata.ResourceVersion; rv != "" {
			w.rv = rv
		}
		return ev, nil
	}
}
