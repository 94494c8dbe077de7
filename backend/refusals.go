package backend

import (
	"log/slog"
	"sync"
	"time"
)

// Refused credentials and logins are audited, and a client that repeats
// one (a password guessed over and over, a forged token) must not grow
// the audit log by a line per request. So the first refusal of a kind
// from one client in a window is written as it comes, and the others in
// that window are counted: one more line at the window's end says how
// many there were and the last reason. Under a flood, a client costs at
// most two lines per window and kind.

// DefaultRefusalWindow is the window in which repeated refusals of one
// kind from one client are counted rather than written.
const DefaultRefusalWindow = time.Minute

// maxRefusalKeys bounds the clients and kinds counted at once
// (refusals.max); refusals beyond it count under one key for all other
// clients.
const maxRefusalKeys = 10000

// otherClients is the client of refusals counted beyond maxRefusalKeys.
const otherClients = "(other clients)"

// refusalKey is a kind of refusal from one client: the audit message,
// the client (its address or the name it gave) and a word for why.
type refusalKey struct{ msg, client, kind string }

type refusalCount struct {
	log   *slog.Logger
	since time.Time
	n     int   // refusals after the first, in the window
	attrs []any // the last one's attributes
	timer *time.Timer
}

// refusals writes refusals to an audit log as the comment above says.
type refusals struct {
	window time.Duration
	max    int
	now    func() time.Time
	// after runs f once d has passed; time.AfterFunc but in tests.
	after func(d time.Duration, f func()) *time.Timer

	mu   sync.Mutex
	seen map[refusalKey]*refusalCount
}

func newRefusals() *refusals {
	return &refusals{window: DefaultRefusalWindow, max: maxRefusalKeys, now: time.Now, after: time.AfterFunc, seen: map[refusalKey]*refusalCount{}}
}

// warn audits the refusal msg of client, of kind, with attrs, to log:
// as the first of the window, or in its count.
func (r *refusals) warn(log *slog.Logger, msg, client, kind string, attrs ...any) {
	now := r.now()
	k := refusalKey{msg: msg, client: client, kind: kind}
	r.mu.Lock()
	c := r.seen[k]
	if c == nil && len(r.seen) >= r.max {
		r.sweepLocked(now)
		if len(r.seen) >= r.max {
			k.client = otherClients
			c = r.seen[k]
		}
	}
	if c == nil || !now.Before(c.since.Add(r.window)) {
		if c != nil && c.timer != nil {
			c.timer.Stop()
			r.flushLocked(k, c)
		}
		r.seen[k] = &refusalCount{log: log, since: now}
		r.mu.Unlock()
		log.Warn(msg, attrs...)
		return
	}
	c.n++
	c.attrs = attrs
	if c.timer == nil {
		c.timer = r.after(c.since.Add(r.window).Sub(now), func() { r.flush(k, c) })
	}
	r.mu.Unlock()
}

// flush writes the count of c, when it is still k's, and forgets it.
func (r *refusals) flush(k refusalKey, c *refusalCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[k] == c {
		r.flushLocked(k, c)
		delete(r.seen, k)
	}
}

func (r *refusals) flushLocked(k refusalKey, c *refusalCount) {
	if c.n == 0 {
		return
	}
	attrs := append(append([]any{}, c.attrs...), "repeated", c.n, "since", c.since.UTC().Format(time.RFC3339))
	if k.client == otherClients {
		attrs = append(attrs, "clients", otherClients)
	}
	c.log.Warn(k.msg+" (repeated)", attrs...)
	c.n = 0
}

// sweepLocked forgets the windows that are over with nothing counted.
func (r *refusals) sweepLocked(now time.Time) {
	for k, c := range r.seen {
		if c.n == 0 && !now.Before(c.since.Add(r.window)) {
			delete(r.seen, k)
		}
	}
}

// close writes every count now, as a stopping server does.
func (r *refusals) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.seen {
		if c.timer != nil {
			c.timer.Stop()
		}
		r.flushLocked(k, c)
		delete(r.seen, k)
	}
}
