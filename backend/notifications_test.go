package backend

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/notify"
)

// hookReceiver is a generic webhook's receiver on loopback that answers
// with code and keeps the bodies it got.
type hookReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	code   int
	bodies []string
}

func newHookReceiver(t *testing.T, code int) *hookReceiver {
	h := &hookReceiver{code: code}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, string(b))
		h.mu.Unlock()
		w.WriteHeader(h.code)
		io.WriteString(w, "receiver says "+http.StatusText(h.code))
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

// startNotifications runs a server with tokens whose notifications have
// two webhook providers: ok, whose receiver takes every message, and
// down, whose receiver answers 500. The token in down's URL is a secret.
func startNotifications(t *testing.T) (*testServer, *hookReceiver, *hookReceiver) {
	t.Helper()
	ok, down := newHookReceiver(t, http.StatusNoContent), newHookReceiver(t, http.StatusInternalServerError)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "down-url"), []byte(down.URL+"/hook?token=s3cr3t-t0ken"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := `
providers:
  - {name: ok, type: webhook, address: "` + ok.URL + `/hook"}
  - {name: down, type: webhook, addressFile: down-url}
alerts:
  - {name: all, providers: [ok, down]}
`
	c, err := notify.ParseConfig([]byte(cfg), filepath.Join(dir, "notifications.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := notify.New(c, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{}, true)
	ts.ServeNotifications(n)
	return ts, ok, down
}

// TestNotificationTest: an editor's test message reaches the provider's
// receiver (204); a provider that does not take it answers 502 with the
// receiver's answer and no secret of the provider; an unknown provider
// 404; a viewer 403; no token 401.
func TestNotificationTest(t *testing.T) {
	ts, ok, down := startNotifications(t)
	code, body := ts.do(t, req{method: "POST", path: "/api/v1/notifications/ok/test", token: "editor"})
	wantCode(t, "test ok", code, body, http.StatusNoContent)
	got := ok.got()
	if len(got) != 1 {
		t.Fatalf("the receiver got %d messages, want 1", len(got))
	}
	var ev notify.Event
	if err := json.Unmarshal([]byte(got[0]), &ev); err != nil || ev.Reason != notify.Test {
		t.Fatalf("the receiver got %s (%v), want a Test event", got[0], err)
	}

	code, body = ts.do(t, req{method: "POST", path: "/api/v1/notifications/down/test", token: "admin", body: []byte("{}")})
	wantCode(t, "test down", code, body, http.StatusBadGateway)
	e := apiErr(t, body)
	if !strings.Contains(e.Message, "not delivered") || !strings.Contains(e.Message, "500") || strings.Contains(string(body), "s3cr3t") {
		t.Fatalf("answer %s, want the receiver's 500 and no token", body)
	}
	if len(down.got()) != 1 {
		t.Fatalf("the failing receiver got %d requests, want 1 (a test is not retried)", len(down.got()))
	}
	if strings.Contains(ts.logs.String(), "s3cr3t") {
		t.Fatal("the server's log holds the provider's token")
	}

	for _, c := range []struct {
		what, path, token string
		body              []byte
		want              int
	}{
		{"unknown provider", "/api/v1/notifications/nope/test", "editor", nil, http.StatusNotFound},
		{"viewer", "/api/v1/notifications/ok/test", "viewer", nil, http.StatusForbidden},
		{"no token", "/api/v1/notifications/ok/test", "", nil, http.StatusUnauthorized},
		{"a body", "/api/v1/notifications/ok/test", "editor", []byte(`{"provider":"x"}`), http.StatusBadRequest},
	} {
		code, body := ts.do(t, req{method: "POST", path: c.path, token: c.token, body: c.body})
		wantCode(t, c.what, code, body, c.want)
	}
	if n := len(ok.got()); n != 1 {
		t.Fatalf("refused requests reached the receiver: %d messages", n)
	}
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/notifications/ok/test", token: "admin"})
	wantCode(t, "GET", code, body, http.StatusMethodNotAllowed)
}

// TestNotificationTestUnconfigured: a server without notifications says
// so, for every provider name.
func TestNotificationTestUnconfigured(t *testing.T) {
	ts := startServer(t, Config{}, true)
	code, body := ts.do(t, req{method: "POST", path: "/api/v1/notifications/slack/test", token: "editor"})
	wantCode(t, "unconfigured", code, body, http.StatusNotImplemented)
	if e := apiErr(t, body); !strings.Contains(e.Message, "--notifications") {
		t.Fatalf("message %q does not name --notifications", e.Message)
	}
}

func apiErr(t *testing.T, body []byte) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	return e
}
