package backend

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// openStore opens the bbolt store in dir, as a server would, with a
// short wait for its file lock.
func openStore(t testing.TB, dir string) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(dir, &bolt.Options{OpenTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testTokens are the tokens the test servers know, by name.
type testTokens map[string]string

// writeTokensFile creates a tokens file with one token per role (view,
// edit, edit2 and admin) and returns the file and the tokens.
func writeTokensFile(t testing.TB) (string, testTokens) {
	t.Helper()
	toks := testTokens{}
	var lines []string
	for _, e := range []struct {
		name string
		role Role
	}{{"viewer", RoleView}, {"editor", RoleEdit}, {"editor2", RoleEdit}, {"admin", RoleAdmin}} {
		tok, line, err := NewToken(e.name, e.role)
		if err != nil {
			t.Fatal(err)
		}
		toks[e.name] = tok
		lines = append(lines, line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# test tokens\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, toks
}

// syncBuffer is a log sink that tests read while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testServer is a Server running on 127.0.0.1:0 in t.TempDir().
type testServer struct {
	*Server
	tokens testTokens
	logs   *syncBuffer
	stop   func() error
}

// startServer boots a Server as `rezuscloud serve` does. With tokens
// true it gets a tokens file from writeTokensFile. Unless cfg.DataDir is
// set, the data dir is a fresh temp dir.
func startServer(t testing.TB, cfg Config, tokens bool) *testServer {
	t.Helper()
	ts := &testServer{logs: &syncBuffer{}}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
	}
	if tokens {
		cfg.TokensFile, ts.tokens = writeTokensFile(t)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		t.Fatal(err)
	}
	ts.Server = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	var stopErr error
	ts.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("server stop: %v", err)
		}
	})
	return ts
}

// req is one request to a test server.
type req struct {
	method string
	path   string
	token  string // name of a test token, sent as basic auth
	bearer string // raw bearer secret
	body   []byte
	md5    bool // send Content-MD5 of body
	header map[string]string
}

// do sends r and returns the status and body.
func (ts *testServer) do(t testing.TB, r req) (int, []byte) {
	t.Helper()
	resp := ts.doResp(t, r)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (ts *testServer) doResp(t testing.TB, r req) *http.Response {
	t.Helper()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	hr, err := http.NewRequest(r.method, ts.URL()+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.token != "" {
		secret, ok := ts.tokens[r.token]
		if !ok {
			t.Fatalf("no test token %q", r.token)
		}
		hr.SetBasicAuth(r.token, secret)
	}
	if r.bearer != "" {
		hr.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	if r.md5 {
		sum := md5.Sum(r.body)
		hr.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
