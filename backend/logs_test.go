package backend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/machinelog"
	"github.com/rezuscloud/rezuscloud/store"
)

// machineLogs serves log streams made of fixed chunks: machine "m-1" of
// tenant "alpha" has them, the machines named after an error fail with it.
type machineLogs struct {
	chunks [][]byte
	// end is what Next returns after the chunks: nil for io.EOF, or an
	// error; block waits for the request to end instead.
	end   error
	block bool

	mu   sync.Mutex
	reqs []machinelog.Request
	open int
}

func (l *machineLogs) OpenLogs(ctx context.Context, tenant, machine string, req machinelog.Request) (machinelog.Stream, error) {
	switch machine {
	case "refused":
		return nil, fmt.Errorf("machine refused at 127.9.0.1 does not answer: connection refused: %w", machinelog.ErrUnreachable)
	case "silent":
		return nil, fmt.Errorf("machine silent: %w", machinelog.ErrTimeout)
	case "broken":
		return nil, errors.New("read /var/lib/secret/bundle: permission denied")
	}
	if tenant != "alpha" || machine != "m-1" {
		return nil, fmt.Errorf("machine %s of %s: %w", machine, tenant, store.ErrNotFound)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, req)
	l.open++
	return &chunkStream{ctx: ctx, l: l}, nil
}

func (l *machineLogs) opened() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

type chunkStream struct {
	ctx    context.Context
	l      *machineLogs
	i      int
	closed bool
}

func (s *chunkStream) Next() ([]byte, error) {
	if s.i < len(s.l.chunks) {
		s.i++
		return s.l.chunks[s.i-1], nil
	}
	if s.l.block {
		<-s.ctx.Done()
		return nil, s.ctx.Err()
	}
	if s.l.end != nil {
		return nil, s.l.end
	}
	return nil, io.EOF
}

func (s *chunkStream) Close() error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.l.open--
	}
	return nil
}

func startLogs(t *testing.T, cfg Config, l *machineLogs) (*testServer, *syncBuffer) {
	t.Helper()
	ts := startServer(t, cfg, true)
	audit := &syncBuffer{}
	ts.ServeMachineLogs(l, slog.New(slog.NewTextHandler(audit, nil)))
	return ts, audit
}

// TestLogsQueryAndChunks: the query reaches the stream as a machinelog.Request,
// with its defaults and bounds, and the chunks come back as they are.
func TestLogsQueryAndChunks(t *testing.T) {
	l := &machineLogs{chunks: [][]byte{[]byte("one\ntw"), []byte("o\n")}}
	ts, _ := startLogs(t, Config{}, l)
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs", token: "editor"})
	if code != http.StatusOK || string(body) != "one\ntwo\n" {
		t.Fatalf("logs: %d %q", code, body)
	}
	ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs?service=etcd&follow=true&tailLines=7", token: "admin"})
	ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/dmesg?tailLines=0", token: "admin"})
	want := []machinelog.Request{
		{Service: "machined", TailLines: DefaultTailLines},
		{Service: "etcd", Follow: true, TailLines: 7},
		{Dmesg: true},
	}
	if fmt.Sprint(l.reqs) != fmt.Sprint(want) {
		t.Errorf("requests %+v, want %+v", l.reqs, want)
	}
	for q, what := range map[string]string{
		"logs?tailLines=10001":  "tailLines",
		"logs?tailLines=-3":     "tailLines",
		"logs?service=Bad/Name": "service",
		"logs?follow=maybe":     "follow",
		"dmesg?service=kubelet": "no service",
		"logs?sse=sometimes":    "sse",
	} {
		code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/" + q, token: "admin"})
		wantCode(t, q, code, body, http.StatusBadRequest)
		wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, what)
	}
	if l.opened() != 0 {
		t.Errorf("%d streams were not closed", l.opened())
	}
}

// TestLogsOpenErrors: a machine that cannot be asked answers 502 or 504
// with the reason; an internal error answers 500 without repeating it.
func TestLogsOpenErrors(t *testing.T) {
	ts, _ := startLogs(t, Config{}, &machineLogs{})
	for machine, want := range map[string]int{"refused": http.StatusBadGateway, "silent": http.StatusGatewayTimeout, "nope": http.StatusNotFound, "broken": http.StatusInternalServerError} {
		path := "/api/v1/tenants/alpha/machines/" + machine + "/logs"
		code, body := ts.do(t, req{method: "GET", path: path, token: "editor"})
		wantCode(t, machine, code, body, want)
		if machine == "refused" {
			wantAPIError(t, body, want, api.ReasonInternalError, "127.9.0.1 does not answer")
		}
		if strings.Contains(string(body), "/var/lib") {
			t.Errorf("%s: the answer repeats an internal error: %s", machine, body)
		}
	}
	if !strings.Contains(ts.logs.String(), "permission denied") {
		t.Errorf("the server log lacks the internal error:\n%s", ts.logs.String())
	}
}

// TestLogsSSE: each line is one event, also across chunks; long lines are
// split; the end is an event of its own.
func TestLogsSSE(t *testing.T) {
	long := strings.Repeat("x", maxSSELine+10)
	l := &machineLogs{chunks: [][]byte{[]byte("a\r\nb"), []byte("c\n\n"), []byte(long + "\nlast")}}
	ts, _ := startLogs(t, Config{}, l)
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs?sse=true", token: "editor"})
	want := "data: a\n\ndata: bc\n\ndata: \n\ndata: " + long[:maxSSELine] + "\n\ndata: xxxxxxxxxx\n\ndata: last\n\nevent: end\ndata: \n\n"
	if code != http.StatusOK || string(body) != want {
		t.Fatalf("sse: %d %q", code, strings.ReplaceAll(string(body), strings.Repeat("x", 100), "x…"))
	}
	resp := ts.doResp(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs", token: "editor", header: map[string]string{"Accept": "text/event-stream"}})
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Accept: text/event-stream gave %s", ct)
	}
}

// TestLogsErrorAfterStart: a stream that fails after its first lines ends
// a text answer with the error in a trailer, an SSE answer with an error
// event.
func TestLogsErrorAfterStart(t *testing.T) {
	l := &machineLogs{chunks: [][]byte{[]byte("line\n")}, end: fmt.Errorf("machine m-1 does not answer: connection reset: %w", machinelog.ErrUnreachable)}
	ts, audit := startLogs(t, Config{}, l)
	resp := ts.doResp(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs?follow=true", token: "editor"})
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "line\n" || !strings.Contains(resp.Trailer.Get(StreamErrorTrailer), "connection reset") {
		t.Fatalf("text: %d %q %v, trailer %q", resp.StatusCode, body, err, resp.Trailer.Get(StreamErrorTrailer))
	}
	_, sse := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs?sse=true", token: "editor"})
	if !strings.HasSuffix(string(sse), "event: error\ndata: machine m-1 does not answer: connection reset: the machine's Talos API does not answer\n\n") {
		t.Errorf("sse: %q", sse)
	}
	if !strings.Contains(audit.String(), `msg="machine logs ended"`) || !strings.Contains(audit.String(), "connection reset") {
		t.Errorf("the audit log does not record the stream's end with its error:\n%s", audit)
	}
}

// TestLogsShutdownEndsFollows: a follow that the machine would keep open
// forever ends when the server shuts down, so that shutdown does not wait
// for its timeout.
func TestLogsShutdownEndsFollows(t *testing.T) {
	l := &machineLogs{chunks: [][]byte{[]byte("first\n")}, block: true}
	ts, _ := startLogs(t, Config{ShutdownTimeout: 3 * time.Second}, l)
	resp := ts.doResp(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs?follow=true", token: "editor"})
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	// With the follow still open, Run fails with its shutdown deadline.
	if err := ts.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after shutdown: %q %v, want the end of the stream", rest, err)
	}
	if l.opened() != 0 {
		t.Errorf("%d streams were not closed", l.opened())
	}
}

// TestLogsStreamLimit: beyond MaxLogStreams open streams the server
// answers 503 with Retry-After, and serves again once one ends.
func TestLogsStreamLimit(t *testing.T) {
	l := &machineLogs{chunks: [][]byte{[]byte("x\n")}, block: true}
	ts, _ := startLogs(t, Config{}, l)
	var open []*http.Response
	for range MaxLogStreams {
		resp := ts.doResp(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs?follow=true", token: "editor"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", len(open), resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp := ts.doResp(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs", token: "editor"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("stream %d: %d, Retry-After %q; want 503 with Retry-After", MaxLogStreams+1, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	for _, r := range open {
		r.Body.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.opened() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l.opened() != 0 {
		t.Fatalf("%d streams still open after their clients went", l.opened())
	}
	l.block = false
	if code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/logs", token: "editor"}); code != http.StatusOK {
		t.Errorf("after the others ended: %d %s", code, body)
	}
}

// TestLogsRolesAndAudit: view and no token are refused, and every
// attempt is in the audit log.
func TestLogsRolesAndAudit(t *testing.T) {
	ts, audit := startLogs(t, Config{}, &machineLogs{})
	for token, want := range map[string]int{"viewer": http.StatusForbidden, "": http.StatusUnauthorized, "editor": http.StatusOK, "admin": http.StatusOK} {
		code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/dmesg", token: token})
		wantCode(t, "dmesg as "+token, code, body, want)
	}
	a := audit.String()
	for _, want := range []string{
		`msg="machine logs refused" who=viewer source=token role=view what=dmesg tenant=alpha machine=m-1`,
		`msg="machine logs refused" who=(unauthenticated) what=dmesg tenant=alpha machine=m-1`,
		`msg="machine logs" who=editor source=token role=edit what=dmesg tenant=alpha machine=m-1`,
		`msg="machine logs" who=admin source=token role=admin what=dmesg tenant=alpha machine=m-1`,
	} {
		if !strings.Contains(a, want) {
			t.Errorf("audit log lacks %q:\n%s", want, a)
		}
	}
}

// TestLogsSession: a dashboard session reads a machine's log as a token
// of its role does, as it reads the rest of the API: edit and admin
// sessions get the stream, a view session 403, an ended session 401; and
// the audit log names the session's token.
func TestLogsSession(t *testing.T) {
	ts, audit := startLogs(t, Config{}, &machineLogs{chunks: [][]byte{[]byte("booted\n")}})
	cookies := map[string]string{}
	for _, name := range []string{"viewer", "editor", "admin"} {
		value, _, err := ts.Sessions().Login("127.0.0.1:1", ts.tokens[name])
		if err != nil {
			t.Fatal(err)
		}
		cookies[name] = SessionCookie + "=" + value
	}
	ended, _, err := ts.Sessions().Login("127.0.0.1:1", ts.tokens["editor"])
	if err != nil {
		t.Fatal(err)
	}
	ts.Sessions().Logout(ended)
	cookies["ended"] = SessionCookie + "=" + ended
	for who, want := range map[string]int{"viewer": http.StatusForbidden, "editor": http.StatusOK, "admin": http.StatusOK, "ended": http.StatusUnauthorized} {
		for _, what := range []string{"logs?sse=true", "dmesg"} {
			code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/machines/m-1/" + what, header: map[string]string{"Cookie": cookies[who]}})
			wantCode(t, what+" with the session of "+who, code, body, want)
			if want == http.StatusOK && !strings.Contains(string(body), "booted") {
				t.Errorf("%s with the session of %s: %q, want the log", what, who, body)
			}
		}
	}
	a := audit.String()
	for _, want := range []string{
		`msg="machine logs refused" who=viewer source=token role=view what=logs tenant=alpha machine=m-1`,
		`msg="machine logs" who=editor source=token role=edit what=logs tenant=alpha machine=m-1`,
		`msg="machine logs" who=admin source=token role=admin what=dmesg tenant=alpha machine=m-1`,
		`msg="machine logs refused" who=(unauthenticated) what=dmesg tenant=alpha machine=m-1`,
	} {
		if !strings.Contains(a, want) {
			t.Errorf("audit log lacks %q:\n%s", want, a)
		}
	}
}
