package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/notify"
)

// notifyRig is a real server whose notifications have two webhook
// providers on loopback receivers: ok takes every message, down answers
// 500. It returns a token file per role and how many messages each
// receiver got.
func notifyRig(t *testing.T, configured bool) (files map[string]string, okGot, downGot *atomic.Int32) {
	t.Helper()
	isolate(t)
	okGot, downGot = new(atomic.Int32), new(atomic.Int32)
	receiver := func(n *atomic.Int32, code int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			n.Add(1)
			w.WriteHeader(code)
		}))
		t.Cleanup(s.Close)
		return s
	}
	ok, down := receiver(okGot, http.StatusOK), receiver(downGot, http.StatusInternalServerError)
	file, tokens := servertest.Tokens(t, map[string]string{"viewer": "view", "editor": "edit"})
	srv := servertest.StartBackend(t, backend.Config{TokensFile: file}, nil)
	if configured {
		c, err := notify.ParseConfig([]byte(`
providers:
  - {name: ok, type: webhook, address: "`+ok.URL+`"}
  - {name: down, type: webhook, address: "`+down.URL+`/hook?token=s3cr3t"}
alerts: [{name: all, providers: [ok, down]}]
`), filepath.Join(t.TempDir(), "notifications.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := notify.New(c, notify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		srv.ServeNotifications(n)
	}
	files = map[string]string{}
	for name, tok := range tokens {
		files[name] = filepath.Join(t.TempDir(), name+".token")
		if err := os.WriteFile(files[name], []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(envServer, srv.URL())
	return files, okGot, downGot
}

// TestNotifyTest: rezusctl notify test sends one test message through the
// server and says whether the provider took it, with the exit codes its
// help gives.
func TestNotifyTest(t *testing.T) {
	tokens, okGot, downGot := notifyRig(t, true)
	code, out, errOut := runCLI(t, "notify", "test", "ok", "--token-file", tokens["editor"])
	if code != 0 || out != "✔ ok took the test message\n" || errOut != "" {
		t.Fatalf("ok: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if okGot.Load() != 1 {
		t.Fatalf("the receiver got %d messages, want 1", okGot.Load())
	}
	for _, c := range []struct {
		args     []string
		code     int
		stderr   []string
		received *atomic.Int32
		want     int32
	}{
		{[]string{"down", "--token-file", tokens["editor"]}, exitFailed, []string{"error: the test message was not delivered", "500"}, downGot, 1},
		{[]string{"nope", "--token-file", tokens["editor"]}, exitFailed, []string{`no notification provider named "nope"`, "[ok down]"}, nil, 0},
		{[]string{"ok", "--token-file", tokens["viewer"]}, exitUsage, []string{"403"}, okGot, 1},
		{[]string{"ok"}, exitUsage, []string{"401"}, okGot, 1},
		{[]string{}, exitUsage, []string{"give one PROVIDER"}, nil, 0},
	} {
		code, out, errOut := runCLI(t, append([]string{"notify", "test"}, c.args...)...)
		if code != c.code || out != "" || strings.Contains(errOut, "s3cr3t") {
			t.Errorf("%v: code %d (want %d), stdout %q, stderr %q", c.args, code, c.code, out, errOut)
		}
		for _, s := range c.stderr {
			if !strings.Contains(errOut, s) {
				t.Errorf("%v: stderr %q lacks %q", c.args, errOut, s)
			}
		}
		if c.received != nil && c.received.Load() != c.want {
			t.Errorf("%v: the receiver got %d messages, want %d", c.args, c.received.Load(), c.want)
		}
	}
}

// TestNotifyTestUnconfigured: a server without notifications says so.
func TestNotifyTestUnconfigured(t *testing.T) {
	tokens, _, _ := notifyRig(t, false)
	code, out, errOut := runCLI(t, "notify", "test", "ok", "--token-file", tokens["editor"])
	if code != exitUsage || out != "" || !strings.Contains(errOut, "no notifications are configured") || !strings.Contains(errOut, "--notifications") {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errOut)
	}
}
