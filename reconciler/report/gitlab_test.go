package report

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const glToken = "glpat-TESTTOKEN0123456789"

func TestGitLabRequest(t *testing.T) {
	f := newForge(t, status(http.StatusCreated))
	g, err := NewGitLab(GitLabOptions{APIURL: f.URL + "/api/v4", RepoURL: "https://gitlab.example/platform/team-a/infra.git", Token: glToken})
	if err != nil {
		t.Fatal(err)
	}
	if g.Name() != "gitlab:platform/team-a/infra" {
		t.Errorf("Name = %q", g.Name())
	}
	statuses := []Status{
		{SHA: testSHA, Context: "rezuscloud/eu/prod", State: StateSuccess, Description: "applied: +2 ~0 -1",
			TargetURL: "https://rezus.example/api/v1/commits/" + testSHA},
		{SHA: testSHA, Context: "rezuscloud/eu/dev", State: StateRunning, Description: "applying"},
		{SHA: testSHA, Context: "rezuscloud/eu/stage", State: StatePending, Description: "queued"},
		{SHA: testSHA, Context: "rezuscloud/eu/test", State: StateFailure, Description: "failed: tofu apply"},
		{SHA: testSHA, Context: "rezuscloud/eu", State: StateError, Description: "superseded by a newer revision"},
	}
	for _, s := range statuses {
		if err := g.Report(context.Background(), s); err != nil {
			t.Fatalf("Report: %v", err)
		}
	}
	got := f.got()
	if len(got) != len(statuses) {
		t.Fatalf("%d requests, want %d", len(got), len(statuses))
	}
	for _, r := range got {
		// The project path is one URL-encoded segment.
		if r.Method != http.MethodPost || r.RequestURI != "/api/v4/projects/platform%2Fteam-a%2Finfra/statuses/"+testSHA {
			t.Errorf("request %s %s", r.Method, r.RequestURI)
		}
		for k, want := range map[string]string{
			"Private-Token": glToken,
			"Content-Type":  "application/json",
			"User-Agent":    "rezuscloud",
		} {
			if v := r.Header.Values(k); len(v) != 1 || v[0] != want {
				t.Errorf("header %s = %q, want %q", k, v, want)
			}
		}
		if a := r.Header.Get("Authorization"); a != "" {
			t.Errorf("Authorization %q sent to GitLab", a)
		}
	}
	want := []map[string]any{
		{"state": "success", "name": "rezuscloud/eu/prod", "description": "applied: +2 ~0 -1",
			"target_url": "https://rezus.example/api/v1/commits/" + testSHA},
		{"state": "running", "name": "rezuscloud/eu/dev", "description": "applying"},
		{"state": "pending", "name": "rezuscloud/eu/stage", "description": "queued"},
		{"state": "failed", "name": "rezuscloud/eu/test", "description": "failed: tofu apply"},
		{"state": "canceled", "name": "rezuscloud/eu", "description": "superseded by a newer revision"},
	}
	for i := range want {
		if diff := cmp.Diff(want[i], got[i].Body); diff != "" {
			t.Errorf("body %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestGitLabProject(t *testing.T) {
	for _, tt := range []struct {
		opts GitLabOptions
		uri  string
	}{
		{GitLabOptions{Project: "1234"}, "/api/v4/projects/1234/statuses/"},
		{GitLabOptions{Project: "/group/proj/"}, "/api/v4/projects/group%2Fproj/statuses/"},
		{GitLabOptions{RepoURL: "git@gitlab.com:group/sub.group/proj.git"}, "/api/v4/projects/group%2Fsub.group%2Fproj/statuses/"},
		{GitLabOptions{RepoURL: "ssh://git@gitlab.com/group/proj.git"}, "/api/v4/projects/group%2Fproj/statuses/"},
	} {
		f := newForge(t, status(http.StatusCreated))
		tt.opts.APIURL, tt.opts.Token = f.URL+"/api/v4", glToken
		g, err := NewGitLab(tt.opts)
		if err != nil {
			t.Fatalf("%+v: %v", tt.opts, err)
		}
		if err := g.Report(context.Background(), Status{SHA: testSHA, Context: "c", State: StateSuccess}); err != nil {
			t.Fatal(err)
		}
		if uri := f.got()[0].RequestURI; uri != tt.uri+testSHA {
			t.Errorf("%+v: request URI %s, want %s", tt.opts, uri, tt.uri+testSHA)
		}
	}
	if _, err := NewGitLab(GitLabOptions{Project: "g/p"}); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token: %v", err)
	}
	if _, err := NewGitLab(GitLabOptions{Token: "t"}); err == nil {
		t.Error("no project accepted")
	}
	g, err := NewGitLab(GitLabOptions{Project: "g/p", Token: "t"})
	if err != nil || g.p.client == nil || g.endpoint != DefaultGitLabAPI+"/projects/g%2Fp/statuses/" {
		t.Errorf("default API: %v, %+v", err, g)
	}
}

func TestGitLabSameStateTwice(t *testing.T) {
	f := newForge(t,
		answer(400, nil, `{"message":"Cannot transition status via :run from :running (Reason(s): Status cannot transition via \"run\")"}`),
		answer(400, nil, `{"message":{"name":["is invalid"]}}`))
	g, err := NewGitLab(GitLabOptions{APIURL: f.URL, Project: "g/p", Token: glToken})
	if err != nil {
		t.Fatal(err)
	}
	s := Status{SHA: testSHA, Context: "c", State: StateRunning}
	if err := g.Report(context.Background(), s); err != nil {
		t.Fatalf("running again: %v", err)
	}
	err = g.Report(context.Background(), s)
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 400 || !errors.Is(err, ErrPermanent) || he.Message != `{"name":["is invalid"]}` {
		t.Fatalf("err = %v", err)
	}
}

// A redirect is not followed, so PRIVATE-TOKEN never reaches another host.
func TestGitLabNoRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer other.Close()
	f := newForge(t, answer(http.StatusPermanentRedirect, http.Header{"Location": {other.URL + "/api/v4/x"}}, ""))
	g, err := NewGitLab(GitLabOptions{APIURL: f.URL, Project: "g/p", Token: glToken, Client: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Report(context.Background(), Status{SHA: testSHA, Context: "c", State: StateSuccess})
	if !errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), "redirected to "+other.URL) {
		t.Fatalf("err = %v", err)
	}
	if elsewhere.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
}
