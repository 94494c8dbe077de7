package test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

// TestSHA256RepositoryRefused: the server on a repository in the SHA-256
// object format says so, with the repository's URL, in /readyz and in
// /api/v1/status (where rezusctl status reads it), logs it once and
// schedules no further poll; a reconcile request polls it again.
func TestSHA256RepositoryRefused(t *testing.T) {
	const refusal = "SHA-256 repositories are not supported yet"
	d := gittest.NewDaemon(t)
	d.CreateSHA256("repo.git", map[string]string{e2eManifests + "/README.md": "No tenants yet.\n"})
	s := readyServer(t, d.URL("repo.git"))
	body := waitReady(s, http.StatusServiceUnavailable, refusal, d.URL("repo.git"))
	if strings.Contains(body, "pkt-line") {
		t.Errorf("/readyz: %q, want no parse error of go-git", body)
	}
	s.WaitFor("the source to stop polling", func() bool { return strings.Contains(s.Log(), "polls stop until a trigger") })
	var st struct {
		Source struct {
			LastError string `json:"lastError"`
			Polls     int    `json:"polls"`
			NextPoll  string `json:"nextPoll"`
		} `json:"source"`
	}
	s.mustGet("/api/v1/status", &st)
	if src := st.Source; !strings.Contains(src.LastError, refusal) || !strings.Contains(src.LastError, d.URL("repo.git")) || src.Polls != 1 || src.NextPoll != "" {
		t.Errorf("/api/v1/status source: %+v; want the refusal after one poll, and no next poll", src)
	}
	if code, b := s.Request(http.MethodPost, "/api/v1/reconcile", []byte(`{}`), http.Header{"Content-Type": {"application/json"}}); code/100 != 2 {
		t.Fatalf("POST /api/v1/reconcile: %d %s", code, b)
	}
	s.WaitFor("the requested poll", func() bool { return s.status().Source.Polls == 2 })
	if n := strings.Count(s.Log(), "polls stop until a trigger"); n != 2 {
		t.Errorf("the refusal is logged %d times after two polls, want 2", n)
	}
}
