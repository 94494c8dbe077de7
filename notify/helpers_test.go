package notify

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// writeFiles writes files (name → content) into a new directory and
// returns the path of the one named "notifications.yaml".
func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "notifications.yaml")
}

// received is one request a receiver got.
type received struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
}

// receiver is a service on loopback that records what it gets and
// answers with the statuses given, in turn, then 200 (or ok).
type receiver struct {
	srv  *httptest.Server
	got  chan received
	mu   sync.Mutex
	all  []received
	plan []int  // statuses to answer, in turn
	ok   int    // status after the plan
	body string // body of a 2xx answer
	// retryAfter is the Retry-After header of a 429 or 503 answer.
	retryAfter string
	// echo makes an error answer quote the request's path and query.
	echo bool
}

func newReceiver(t testing.TB, plan ...int) *receiver {
	t.Helper()
	r := &receiver{got: make(chan received, 4096), plan: plan, ok: http.StatusOK}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rec := received{Method: req.Method, Path: req.URL.EscapedPath(), Query: req.URL.RawQuery, Header: req.Header.Clone(), Body: body}
		r.mu.Lock()
		r.all = append(r.all, rec)
		status, answer, retryAfter, echo := r.ok, r.body, r.retryAfter, r.echo
		if len(r.plan) > 0 {
			status, r.plan = r.plan[0], r.plan[1:]
		}
		r.mu.Unlock()
		if status >= 300 {
			answer = "the receiver answers " + http.StatusText(status)
			if echo {
				answer += " to " + req.URL.String()
			}
			if retryAfter != "" && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
				w.Header().Set("Retry-After", retryAfter)
			}
		}
		w.WriteHeader(status)
		io.WriteString(w, answer)
		r.got <- rec
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// next returns the next request, failing the test if none comes.
func (r *receiver) next(t testing.TB) received {
	t.Helper()
	select {
	case rec := <-r.got:
		return rec
	case <-time.After(20 * time.Second):
		t.Fatal("the receiver got nothing")
		return received{}
	}
}

// none fails the test when a request is waiting in r.
func (r *receiver) none(t testing.TB) {
	t.Helper()
	select {
	case rec := <-r.got:
		t.Fatalf("the receiver got an unexpected request: %s %s %s", rec.Method, rec.Path, rec.Body)
	default:
	}
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// testClock is the clock of a test: it moves only when told.
type testClock struct {
	mu      sync.Mutex
	now     time.Time
	waits   []clockWait
	waiting chan struct{}
}

type clockWait struct {
	at time.Time
	ch chan time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), waiting: make(chan struct{}, 1)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// until is the Notifier's until on the test clock.
func (c *testClock) until(at time.Time) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !at.After(c.now) {
		ch <- c.now
		return ch, func() {}
	}
	c.waits = append(c.waits, clockWait{at: at, ch: ch})
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, w := range c.waits {
			if w.ch == ch {
				c.waits = append(c.waits[:i], c.waits[i+1:]...)
				break
			}
		}
	}
}

// advanceToWait waits until something waits for the clock, moves the
// clock to the earliest time waited for, fires what waits for it, and
// returns how far the clock moved.
func (c *testClock) advanceToWait(t testing.TB) time.Duration {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		if len(c.waits) > 0 {
			at := c.waits[0].at
			for _, w := range c.waits {
				if w.at.Before(at) {
					at = w.at
				}
			}
			moved := at.Sub(c.now)
			c.now = at
			var rest []clockWait
			for _, w := range c.waits {
				if w.at.After(at) {
					rest = append(rest, w)
				} else {
					w.ch <- at
				}
			}
			c.waits = rest
			c.mu.Unlock()
			return moved
		}
		c.mu.Unlock()
		select {
		case <-c.waiting:
		case <-deadline:
			t.Fatal("nothing waits for the clock")
		}
	}
}

// advance moves the clock by d and fires what waits until then.
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	var rest []clockWait
	for _, w := range c.waits {
		if w.at.After(c.now) {
			rest = append(rest, w)
		} else {
			w.ch <- c.now
		}
	}
	c.waits = rest
}

// harness is a Notifier of a test, on a test clock, with its metrics.
type harness struct {
	n     *Notifier
	clock *testClock
	reg   *prometheus.Registry
	log   *lockedWriter
	stop  func()
}

// start makes the Notifier of the config at path and, when run, runs it
// until the test ends.
func start(t testing.TB, path string, run bool) *harness {
	t.Helper()
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{clock: newTestClock(), reg: prometheus.NewRegistry(), log: &lockedWriter{w: &strings.Builder{}}}
	logger := slog.New(slog.NewTextHandler(h.log, nil))
	n, err := New(cfg, Options{Logger: logger, Registerer: h.reg, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	n.until = h.clock.until
	h.n = n
	h.stop = func() {}
	if run {
		h.run(t)
	}
	return h
}

// run starts delivering until the test ends.
func (h *harness) run(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.n.Run(ctx); close(done) }()
	h.stop = func() { cancel(); <-done }
	t.Cleanup(h.stop)
}

// metric is the value of rezuscloud_notifications_total for provider and
// result.
func (h *harness) metric(provider, result string) float64 {
	var m dto.Metric
	if err := h.n.metrics.total.WithLabelValues(provider, result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// waitMetric waits until the metric reaches want.
func (h *harness) waitMetric(t testing.TB, provider, result string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for h.metric(provider, result) < want {
		if time.Now().After(deadline) {
			t.Fatalf("rezuscloud_notifications_total{provider=%q,result=%q} = %v, want %v", provider, result, h.metric(provider, result), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// event is a tenant's event of a test.
func event(reason Reason, tenant string) Event {
	sev := SeverityError
	if problemSeverity(reason) == SeverityInfo || len(resolves(reason)) > 0 {
		sev = SeverityInfo
	}
	return Event{Reason: reason, Severity: sev, Tenant: tenant, Labels: map[string]string{"env": "prod"},
		Commit:  Commit{SHA: "0123456789abcdef0123456789abcdef01234567", Subject: "raise the worker count"},
		Message: "tofu apply failed: the sim cloud refused the instance",
		URL:     "https://rezus.example.com/tenants/" + tenant, Time: time.Date(2026, 12, 1, 9, 59, 0, 0, time.UTC)}
}
