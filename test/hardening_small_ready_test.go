package test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// readyServer starts `rezuscloud serve` on repo, with a short poll
// interval, and returns it once it serves.
func readyServer(t *testing.T, repo string) *e2eServer {
	t.Helper()
	s := newE2EServer(t, servertest.Options{Repo: repo, Path: e2eManifests, Args: []string{"--poll-interval", "200ms"}})
	s.Start()
	return s
}

// waitReady polls /readyz until its status is code and its body contains
// every one of want, and returns the body.
func waitReady(s *e2eServer, code int, want ...string) string {
	s.t.Helper()
	var body string
	deadline := time.Now().Add(e2eTimeout)
	for {
		got, b := s.Request(http.MethodGet, "/readyz", nil, nil)
		body = string(b)
		ok := got == code
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			return body
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("/readyz: %d %q, want %d with %q", got, body, code, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHardeningReadyAfterFirstFetch: /readyz says 503, with the reason,
// while the repository has never been fetched, and 200 once it has.
func TestHardeningReadyAfterFirstFetch(t *testing.T) {
	// Nothing listens on port 1: every poll fails.
	dead := readyServer(t, "git://127.0.0.1:1/x")
	body := waitReady(dead, http.StatusServiceUnavailable, "source: git://127.0.0.1:1/x has never been fetched successfully", "connection refused")
	t.Logf("unreachable repository: /readyz 503 %s", body)
	if code := dead.Get("/healthz", nil); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200: the server itself is alive", code)
	}

	// A repository that becomes reachable after the server started.
	d := gittest.NewDaemon(t)
	d.CreateBare("repo.git")
	w := gittest.NewWorkdir(t, d.URL("repo.git"))
	w.Write(e2eManifests+"/README.md", "No tenants yet.\n")
	w.Commit("Empty clusters")
	w.Push()
	d.Stop()
	s := readyServer(t, d.URL("repo.git"))
	waitReady(s, http.StatusServiceUnavailable, "never been fetched successfully", d.Addr())
	d.Start()
	waitReady(s, http.StatusOK, "ok")

	// Once ready, a failing poll does not make the server unready: it
	// keeps serving what it fetched last.
	d.Stop()
	s.WaitFor("a failed poll", func() bool { return s.status().Source.Failures > 0 })
	waitReady(s, http.StatusOK, "ok")
}

// TestHardeningSelectorsThroughServer sends label selectors to the real
// server: the ones Kubernetes accepts, > and < among them, are served, and
// the ones it refuses are a 400.
func TestHardeningSelectorsThroughServer(t *testing.T) {
	d := gittest.NewDaemon(t)
	d.CreateBare("repo.git")
	w := gittest.NewWorkdir(t, d.URL("repo.git"))
	w.Write(e2eManifests+"/README.md", "No tenants yet.\n")
	w.Commit("Empty clusters")
	w.Push()
	s := readyServer(t, d.URL("repo.git"))
	for sel, want := range map[string]int{
		"x>1":                               http.StatusOK,
		"env<10,rezuscloud.io/tenant":       http.StatusOK,
		strings.Repeat("k", 64):             http.StatusBadRequest,
		strings.Repeat("p", 254) + "/k":     http.StatusBadRequest,
		"env=prod\u00a0":                    http.StatusBadRequest,
		"env=prod\v":                        http.StatusBadRequest,
		"rezuscloud.io/preview in (true,)":  http.StatusOK,
		"rezuscloud.io/preview notin (,) ,": http.StatusBadRequest,
	} {
		for _, path := range []string{"/api/v1/commits", "/api/v1/machines"} {
			if code, body := s.Request(http.MethodGet, path+"?labelSelector="+url.QueryEscape(sel), nil, nil); code != want {
				t.Errorf("GET %s labelSelector %q: %d %s, want %d", path, sel, code, body, want)
			}
		}
	}
}
