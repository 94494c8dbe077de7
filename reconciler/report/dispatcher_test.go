package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// syncBuffer is a log sink safe for the dispatcher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger() (*slog.Logger, *syncBuffer) {
	var buf syncBuffer
	return slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

func fastOptions(log *slog.Logger) DispatcherOptions {
	return DispatcherOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Timeout: 5 * time.Second, Logger: log}
}

func closeNow(t *testing.T, d *Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func st(context, desc string) Status {
	return Status{SHA: testSHA, Context: context, State: StatePending, Description: desc}
}

func TestDispatcherRetriesServerError(t *testing.T) {
	f := newForge(t, answer(500, nil, `{"message":"oops"}`), status(201))
	log, logs := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	d.Send(st("rezuscloud/eu/prod", "applying"))
	closeNow(t, d)
	got := f.got()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if got[0].RawBody != got[1].RawBody {
		t.Errorf("the retry sent %s, the first try %s", got[1].RawBody, got[0].RawBody)
	}
	s := d.Stats()
	if s.Sent != 1 || s.Delivered != 1 || s.Retries != 1 || s.Failed != 0 || s.Pending != 0 {
		t.Errorf("stats %+v", s)
	}
	if !strings.Contains(logs.String(), "retrying") || !strings.Contains(logs.String(), "500 Internal Server Error: oops") {
		t.Errorf("log does not tell of the retry:\n%s", logs)
	}
}

func TestDispatcherHonorsRetryAfter(t *testing.T) {
	f := newForge(t, answer(429, http.Header{"Retry-After": {"1"}}, `{"message":"slow down"}`), status(201))
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	d.Send(st("rezuscloud/eu/prod", "applying"))
	closeNow(t, d)
	got := f.got()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if gap := got[1].At.Sub(got[0].At); gap < time.Second {
		t.Fatalf("retried after %v, before the Retry-After of 1s", gap)
	}
	if s := d.Stats(); s.Delivered != 1 || s.Retries != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestDispatcherDropsPermanentFailure(t *testing.T) {
	f := newForge(t, answer(422, nil, `{"message":"No commit found for SHA: `+testSHA+`"}`))
	log, logs := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	d.Send(st("rezuscloud/eu/prod", "applying"))
	closeNow(t, d)
	if n := len(f.got()); n != 1 {
		t.Fatalf("%d requests, want 1: a 422 is not retried", n)
	}
	if s := d.Stats(); s.Failed != 1 || s.Retries != 0 || s.Delivered != 0 {
		t.Errorf("stats %+v", s)
	}
	if !strings.Contains(logs.String(), "not retrying") || !strings.Contains(logs.String(), "No commit found") {
		t.Errorf("log:\n%s", logs)
	}
}

func TestDispatcherGivesUpAfterMaxAttempts(t *testing.T) {
	// A listener that is closed refuses connections: a network error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	log, logs := testLogger()
	opts := fastOptions(log)
	opts.MaxAttempts = 3
	d := NewDispatcher([]Reporter{newTestGitHub(t, url)}, opts)
	d.Send(st("rezuscloud/eu/prod", "applying"))
	closeNow(t, d)
	if s := d.Stats(); s.Retries != 2 || s.Failed != 1 || s.Delivered != 0 {
		t.Errorf("stats %+v", s)
	}
	if !strings.Contains(logs.String(), `"attempts":3`) || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("log:\n%s", logs)
	}
}

func TestDispatcherMaxAge(t *testing.T) {
	f := newForge(t, answer(503, nil, ""))
	log, _ := testLogger()
	opts := fastOptions(log)
	opts.MaxAge = 100 * time.Millisecond
	opts.MaxAttempts = 1000
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, opts)
	start := time.Now()
	d.Send(st("rezuscloud/eu/prod", "applying"))
	closeNow(t, d)
	if s := d.Stats(); s.Failed != 1 {
		t.Errorf("stats %+v", s)
	}
	if n := len(f.got()); n < 1 || n > 12 {
		t.Errorf("%d attempts within a max age of 100ms and backoff from 10ms", n)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("giving up took %v", took)
	}
}

// gate holds every request until it is opened.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) hold(code int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-g.ch:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(code)
	}
}

func TestDispatcherCoalesces(t *testing.T) {
	g := newGate()
	f := newForge(t, g.hold(201))
	t.Cleanup(g.open)
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	d.Send(st("rezuscloud/eu/prod", "update 0"))
	f.wait(t, 1) // the first is in flight, held by the gate
	start := time.Now()
	for i := 1; i <= 500; i++ {
		d.Send(st("rezuscloud/eu/prod", fmt.Sprintf("update %d", i)))
		d.Send(st("rezuscloud/eu/dev", fmt.Sprintf("dev %d", i)))
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("1000 Sends took %v while the forge hung", took)
	}
	if s := d.Stats(); s.Pending != 2 || s.Coalesced != 998 {
		t.Errorf("while held: stats %+v, want 2 pending, 998 coalesced", s)
	}
	g.open()
	closeNow(t, d)
	got := f.got()
	var descs []string
	for _, r := range got {
		descs = append(descs, r.Body["context"].(string)+" "+r.Body["description"].(string))
	}
	want := []string{"rezuscloud/eu/prod update 0", "rezuscloud/eu/prod update 500", "rezuscloud/eu/dev dev 500"}
	if strings.Join(descs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("delivered:\n%s\nwant:\n%s", strings.Join(descs, "\n"), strings.Join(want, "\n"))
	}
	if s := d.Stats(); s.Delivered != 3 || s.Sent != 1001 {
		t.Errorf("stats %+v", s)
	}
}

func TestDispatcherBufferBound(t *testing.T) {
	g := newGate()
	f := newForge(t, g.hold(201))
	t.Cleanup(g.open)
	log, logs := testLogger()
	opts := fastOptions(log)
	opts.Buffer = 5
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, opts)
	d.Send(st("rezuscloud/eu/first", "in flight"))
	f.wait(t, 1)
	for i := range 20 {
		d.Send(st(fmt.Sprintf("rezuscloud/eu/t%02d", i), "queued"))
	}
	if s := d.Stats(); s.Pending != 5 || s.Overflowed != 15 {
		t.Errorf("stats %+v, want 5 pending and 15 overflowed", s)
	}
	g.open()
	closeNow(t, d)
	var contexts []string
	for _, r := range f.got() {
		contexts = append(contexts, r.Body["context"].(string))
	}
	want := "rezuscloud/eu/first rezuscloud/eu/t15 rezuscloud/eu/t16 rezuscloud/eu/t17 rezuscloud/eu/t18 rezuscloud/eu/t19"
	if got := strings.Join(contexts, " "); got != want {
		t.Fatalf("delivered %s\nwant      %s", got, want)
	}
	if !strings.Contains(logs.String(), "too many waiting") {
		t.Errorf("log:\n%s", logs)
	}
}

func TestDispatcherCloseDrains(t *testing.T) {
	f := newForge(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(201)
	})
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	for i := range 10 {
		d.Send(st(fmt.Sprintf("rezuscloud/eu/t%d", i), "applied"))
	}
	closeNow(t, d)
	if n := len(f.got()); n != 10 {
		t.Fatalf("%d delivered before Close returned, want 10", n)
	}
	d.Send(st("rezuscloud/eu/late", "after close"))
	time.Sleep(50 * time.Millisecond)
	if n := len(f.got()); n != 10 {
		t.Fatalf("a status sent after Close was delivered")
	}
	if err := d.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDispatcherCloseDeadline(t *testing.T) {
	g := newGate()
	f := newForge(t, g.hold(201))
	t.Cleanup(g.open)
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	for i := range 3 {
		d.Send(st(fmt.Sprintf("rezuscloud/eu/t%d", i), "applied"))
	}
	f.wait(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.Close(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v with a deadline of 200ms", took)
	}
	if err == nil || !strings.Contains(err.Error(), "3 not delivered") {
		t.Fatalf("Close = %v, want 3 not delivered", err)
	}
	if s := d.Stats(); s.Abandoned != 3 || s.Pending != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A slow or dead forge delays only its own statuses.
func TestDispatcherReportersAreIndependent(t *testing.T) {
	g := newGate()
	hung := newForge(t, g.hold(201))
	t.Cleanup(g.open)
	fine := newForge(t, status(201))
	gl, err := NewGitLab(GitLabOptions{APIURL: fine.URL, Project: "g/p", Token: glToken})
	if err != nil {
		t.Fatal(err)
	}
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, hung.URL), gl}, fastOptions(log))
	for i := range 5 {
		d.Send(st(fmt.Sprintf("rezuscloud/eu/t%d", i), "applied"))
	}
	fine.wait(t, 5)
	hung.wait(t, 1)
	if n := len(hung.got()); n != 1 {
		t.Errorf("the hung forge got %d requests, want 1", n)
	}
	g.open()
	closeNow(t, d)
	if s := d.Stats(); s.Delivered != 10 || s.Sent != 10 {
		t.Errorf("stats %+v", s)
	}
}

func TestDispatcherNeverLogsToken(t *testing.T) {
	// The forge echoes the request's credentials back in its errors.
	echo := func(code int) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			io.WriteString(w, `{"message":"bad: `+r.Header.Get("Authorization")+r.Header.Get("Private-Token")+`"}`)
		}
	}
	gh := newForge(t, echo(500), echo(401))
	glf := newForge(t, echo(503), echo(403))
	gl, err := NewGitLab(GitLabOptions{APIURL: glf.URL, Project: "g/p", Token: glToken})
	if err != nil {
		t.Fatal(err)
	}
	log, logs := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, gh.URL), gl}, fastOptions(log))
	d.Send(st("rezuscloud/eu/prod", "applied"))
	closeNow(t, d)
	out := logs.String()
	if s := d.Stats(); s.Failed != 2 || s.Retries != 2 {
		t.Errorf("stats %+v", s)
	}
	for _, tok := range []string{ghToken, glToken} {
		if strings.Contains(out, tok) {
			t.Fatalf("the log shows a token:\n%s", out)
		}
	}
	if strings.Count(out, "bad: Bearer [redacted]") != 2 || strings.Count(out, "bad: [redacted]") != 2 {
		t.Errorf("the log does not show the forge's (redacted) answers:\n%s", out)
	}
}

func TestDispatcherDropsMalformed(t *testing.T) {
	f := newForge(t, status(201))
	log, logs := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	d.Send(Status{SHA: "main", Context: "c", State: StateSuccess}, st("rezuscloud/eu", "ok"))
	closeNow(t, d)
	if n := len(f.got()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if !strings.Contains(logs.String(), `commit \"main\" is not a full`) {
		t.Errorf("log:\n%s", logs)
	}
}

// The statuses of a whole commit are sent at every phase change; only
// those that changed reach the forge.
func TestDispatcherSkipsUnchanged(t *testing.T) {
	f := newForge(t, status(201))
	log, _ := testLogger()
	d := NewDispatcher([]Reporter{newTestGitHub(t, f.URL)}, fastOptions(log))
	c := commitAt(schema.CommitApplying, false, schema.TenantResult{Tenant: "dev", Phase: schema.CommitSucceeded})
	d.Send(StatusesFor("eu", c, "")...)
	waitFor(t, "two statuses delivered", func() bool { return d.Stats().Delivered == 2 })
	c.Status.Tenants = append(c.Status.Tenants, schema.TenantResult{Tenant: "prod", Phase: schema.CommitSucceeded})
	c.Status.Phase = schema.CommitSucceeded
	d.Send(StatusesFor("eu", c, "")...)
	closeNow(t, d)
	var sent []string
	for _, r := range f.got() {
		sent = append(sent, r.Body["context"].(string)+" "+r.Body["state"].(string))
	}
	want := "rezuscloud/eu pending|rezuscloud/eu/dev success|rezuscloud/eu success|rezuscloud/eu/prod success"
	if got := strings.Join(sent, "|"); got != want {
		t.Fatalf("sent %s\nwant %s", got, want)
	}
	if s := d.Stats(); s.Unchanged != 1 || s.Delivered != 4 || s.Sent != 5 {
		t.Errorf("stats %+v", s)
	}
}

func TestNilDispatcher(t *testing.T) {
	var d *Dispatcher
	d.Send(st("rezuscloud/eu", "ok"))
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s != (DispatcherStats{}) {
		t.Fatalf("stats %+v", s)
	}
}
