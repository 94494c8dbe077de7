package gittest

import (
	"bytes"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/url"
	"os/exec"
	"sync/atomic"
	"testing"
)

// HTTP serves the bare repositories under a temporary directory over smart
// HTTP with the real `git http-backend`, behind basic auth. Clone, fetch and
// push all need the credentials it was created with.
type HTTP struct {
	repos
	l        *listener
	user     string
	pass     string
	backend  *cgi.Handler
	requests atomic.Int64
	denied   atomic.Int64
}

// NewHTTP starts a smart HTTP git server for the rest of the test that
// accepts only user and pass.
func NewHTTP(t testing.TB, user, pass string) *HTTP {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git http-backend needs the git CLI: %v", err)
	}
	h := &HTTP{repos: repos{t: t, root: t.TempDir()}, user: user, pass: pass}
	h.backend = &cgi.Handler{
		Path: git,
		Args: []string{"http-backend"},
		Root: "/",
		Env:  append(gitEnv(), "GIT_PROJECT_ROOT="+h.root, "GIT_HTTP_EXPORT_ALL=1"),
	}
	h.l = newListener(t, h.serve)
	t.Cleanup(h.Stop)
	return h
}

// URL returns the http:// URL of the repository name, without credentials.
func (h *HTTP) URL(name string) string {
	return "http://" + h.l.addr + "/" + name
}

// AuthURL returns the URL of the repository name with the server's
// credentials in it, for the git CLI in a Workdir.
func (h *HTTP) AuthURL(name string) string {
	u := url.URL{Scheme: "http", User: url.UserPassword(h.user, h.pass), Host: h.l.addr, Path: "/" + name}
	return u.String()
}

// Requests returns how many HTTP requests the server has received.
func (h *HTTP) Requests() int { return int(h.requests.Load()) }

// Denied returns how many requests were refused for missing or wrong
// credentials.
func (h *HTTP) Denied() int { return int(h.denied.Load()) }

// Stop makes the server unreachable: it closes the listening socket and
// every open connection. Connections are refused until Start.
func (h *HTTP) Stop() { h.l.stop() }

// Start listens again on the same address after Stop.
func (h *HTTP) Start() {
	h.t.Helper()
	h.l.start()
}

func (h *HTTP) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(h.handle)}
	srv.Serve(ln)
	srv.Close()
}

func (h *HTTP) handle(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	user, pass, ok := r.BasicAuth()
	if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(h.user)) != 1 ||
		subtle.ConstantTimeCompare([]byte(pass), []byte(h.pass)) != 1 {
		h.denied.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}
	// git http-backend needs a known length: a chunked push body larger
	// than 1 MB fails with 400 otherwise.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	h.backend.ServeHTTP(w, r)
}
