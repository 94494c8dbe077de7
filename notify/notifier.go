package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
	"github.com/rezuscloud/rezuscloud/internal/redact"
)

// Options are the Notifier's dependencies; every one has a default.
type Options struct {
	// Logger takes a line for every message not delivered; nil discards.
	Logger *slog.Logger
	// Registerer takes the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Client sends the requests; nil is a client of its own.
	Client *http.Client
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Retries: after a failure a provider waits 2s, then 4s, 8s, … up to 5
// minutes after each further failure in a row, before its next attempt;
// a message is given up after 10 tries (about 14 minutes), or at once when
// the service refuses it (a 4xx other than 408 and 429).
var retryPolicy = backoff.Policy{Base: 2 * time.Second, Max: 5 * time.Minute, Jitter: 0.2}

const maxTries = 10

// Notifier sends events to the providers of the alerts they match. It is
// the server's Sink: Notify queues and returns, and Run delivers.
type Notifier struct {
	cfg     *Config
	log     *slog.Logger
	client  *http.Client
	now     func() time.Time
	metrics *metrics
	sinks   []*sink
	byName  map[string]*sink
	routes  []route
	// until returns a channel that fires when the clock reaches deadline,
	// and a function that stops it; tests replace it with a test clock's.
	until func(deadline time.Time) (<-chan time.Time, func())
	retry backoff.Policy
	// started and tests make the IDs of test messages.
	started time.Time
	tests   atomic.Uint64
}

var _ Sink = (*Notifier)(nil)

// sink is one provider with its queue.
type sink struct {
	p      *Provider
	q      *queue
	build  builder
	redact *redact.Redactor
}

// route is an alert and the sinks of its providers.
type route struct {
	alert *Alert
	sinks []int
}

// New makes the Notifier of cfg. It sends nothing before Run.
func New(cfg *Config, opts Options) (*Notifier, error) {
	if cfg == nil {
		return nil, errors.New("notify: no config")
	}
	n := &Notifier{cfg: cfg, log: opts.Logger, client: opts.Client, now: opts.Now, byName: map[string]*sink{}, retry: retryPolicy}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.client == nil {
		n.client = &http.Client{}
	}
	if n.now == nil {
		n.now = time.Now
	}
	n.started = time.Now()
	n.until = func(deadline time.Time) (<-chan time.Time, func()) {
		t := time.NewTimer(deadline.Sub(n.now()))
		return t.C, func() { t.Stop() }
	}
	n.metrics = newMetrics(cfg.Providers, func(i int) func() float64 {
		return func() float64 { return float64(n.sinks[i].q.length()) }
	})
	index := map[string]int{}
	for i, p := range cfg.Providers {
		s := &sink{p: p, build: builders[p.Type], redact: redact.New(secretsOf(p)...)}
		s.q = newQueue(p.QueueSize, cfg.CoalesceWindow,
			n.metrics.total.WithLabelValues(p.Name, resultCoalesced), n.metrics.total.WithLabelValues(p.Name, resultDropped))
		if s.build == nil {
			return nil, fmt.Errorf("notify: provider %s: unknown type %q", p.Name, p.Type)
		}
		n.sinks = append(n.sinks, s)
		n.byName[p.Name] = s
		index[p.Name] = i
	}
	for _, a := range cfg.Alerts {
		r := route{alert: a}
		for _, name := range a.Providers {
			i, ok := index[name]
			if !ok {
				return nil, fmt.Errorf("notify: alert %s: no provider named %q", a.Name, name)
			}
			r.sinks = append(r.sinks, i)
		}
		n.routes = append(n.routes, r)
	}
	if err := n.metrics.register(opts.Registerer); err != nil {
		return nil, fmt.Errorf("notify: metrics: %w", err)
	}
	return n, nil
}

// secretsOf returns what of p's settings must never be shown: its address
// and the parts of it that may be tokens, and its secret.
func secretsOf(p *Provider) []string {
	out := []string{p.address, p.secret}
	if u, err := url.Parse(p.address); err == nil {
		out = append(out, u.Path, u.RawQuery, u.EscapedPath())
		for _, vs := range u.Query() {
			out = append(out, vs...)
		}
	}
	return out
}

// Providers returns the names of the configured providers, in the
// config's order; none for a nil Notifier.
func (n *Notifier) Providers() []string {
	if n == nil {
		return nil
	}
	out := make([]string, len(n.sinks))
	for i, s := range n.sinks {
		out[i] = s.p.Name
	}
	return out
}

// Notify queues ev for the providers of every alert it matches, once per
// provider. It never blocks and never fails: a full queue drops its
// oldest message. A nil Notifier drops every event.
func (n *Notifier) Notify(ev Event) {
	if n == nil {
		return
	}
	now := n.now()
	if ev.Time.IsZero() {
		ev.Time = now
	}
	var to []int
	for _, r := range n.routes {
		if !r.alert.Matches(ev) {
			continue
		}
		for _, i := range r.sinks {
			if !slices.Contains(to, i) {
				to = append(to, i)
			}
		}
	}
	if len(to) == 0 {
		return
	}
	ev.Labels = maps.Clone(ev.Labels) // the caller may change its map
	for _, i := range to {
		s := n.sinks[i]
		s.q.push(ev, s.p.Name, now)
	}
}

// The errors of Test that are the caller's: no notifications configured
// (a nil Notifier), and no provider of that name.
var (
	ErrNotConfigured = errors.New("no notifications are configured (--notifications)")
	ErrNoProvider    = errors.New("no provider named")
)

// Test sends a test message to the provider named provider, now, once,
// and returns why it was not delivered. The error holds none of the
// provider's secrets.
func (n *Notifier) Test(ctx context.Context, provider string) error {
	if n == nil {
		return ErrNotConfigured
	}
	s := n.byName[provider]
	if s == nil {
		return fmt.Errorf("%w %q", ErrNoProvider, provider)
	}
	ev := Event{Reason: Test, Severity: SeverityInfo, Time: n.now(),
		Message: fmt.Sprintf("A test message from RezusCloud to the provider %s.", provider)}
	err := n.send(ctx, s, &Notification{Event: ev, Count: 1, Provider: provider}, 1<<63|n.tests.Add(1))
	if err != nil {
		n.metrics.count(provider, resultFailed)
		return fmt.Errorf("provider %s: %w", provider, err)
	}
	n.metrics.count(provider, resultSent)
	return nil
}

// Run delivers queued messages until ctx ends, one provider's messages
// in order, each provider on its own. It returns when every delivery has
// stopped; messages still queued then are not sent.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range n.sinks {
		wg.Go(func() { n.deliver(ctx, s) })
	}
	wg.Wait()
}

// deliver sends s's messages as they become due.
func (n *Notifier) deliver(ctx context.Context, s *sink) {
	for ctx.Err() == nil {
		e, wait := s.q.next(n.now())
		if e != nil {
			n.attempt(ctx, s, e)
			continue
		}
		var fire <-chan time.Time
		stop := func() {}
		if !wait.IsZero() {
			fire, stop = n.until(wait)
		}
		select {
		case <-ctx.Done():
		case <-s.q.wake:
		case <-fire:
		}
		stop()
	}
}

// attempt sends e once, and on failure queues it again or gives up.
func (n *Notifier) attempt(ctx context.Context, s *sink, e *entry) {
	err := n.send(ctx, s, &e.n, e.id)
	name := s.p.Name
	if err == nil {
		s.q.delivered()
		n.metrics.count(name, resultSent)
		return
	}
	if ctx.Err() != nil {
		return // shutting down: not the provider's failure
	}
	e.tries++
	var de *deliveryError
	permanent := errors.As(err, &de) && de.permanent
	attrs := []any{"provider", name, "type", s.p.Type, "reason", e.n.Reason, "tenant", e.n.Tenant, "attempt", e.tries, "err", err}
	if permanent { // the service answers, and refuses this message
		n.metrics.count(name, resultFailed)
		n.log.Error("notification refused, given up", attrs...)
		return
	}
	delay := n.retry.Delay(s.q.failed())
	if e.tries >= maxTries {
		n.metrics.count(name, resultFailed)
		n.log.Error("notification not delivered, given up", attrs...)
		s.q.wait(n.now().Add(delay))
		return
	}
	if de != nil && de.after > delay {
		delay = min(de.after, n.retry.Max)
	}
	n.metrics.count(name, resultRetried)
	n.log.Warn("notification not delivered, will retry", append(attrs, "retryIn", delay)...)
	s.q.retry(e, n.now().Add(delay))
}

// send renders m and sends it to s's provider once. id identifies the
// message across retries (Matrix's transaction ID).
func (n *Notifier) send(ctx context.Context, s *sink, m *Notification, id uint64) error {
	text, terr := s.p.text(m)
	if terr != nil {
		n.log.Warn("notification template failed; the default text is sent", "provider", s.p.Name, "err", terr)
	}
	txn := fmt.Sprintf("rezuscloud.%d.%d", n.started.UnixNano(), id)
	r, err := s.build(s.p, &outgoing{Notification: m, text: text, txn: txn, now: n.now()})
	if err != nil {
		return &deliveryError{msg: "cannot make the message: " + s.redact.String(err.Error()), permanent: true}
	}
	return do(ctx, n.client, s.p, s.redact, r)
}
