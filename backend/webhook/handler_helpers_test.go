package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

var testSecret = []byte("s3cr3t-webhook-key")

// call is one call of Trigger.
type call struct{ URL, Ref string }

// follower is a Trigger that follows one repository and ref ("" for any
// ref), compares as
// the git source does, and records every call and every fetch it asked for.
type follower struct {
	url, ref string

	mu    sync.Mutex
	calls []call
	fired []call
}

func (f *follower) Trigger(repoURL, ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{repoURL, ref})
	if repoURL != "" && NormalizeRepoURL(repoURL) != NormalizeRepoURL(f.url) {
		return false
	}
	if ref != "" && f.ref != "" && ref != f.ref {
		return false
	}
	f.fired = append(f.fired, call{repoURL, ref})
	return true
}

func (f *follower) fires() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.fired...)
}

// observed counts Observe calls by hook/result.
type observed struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *observed) observe(hook, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[hook+"/"+result]++
}

func (o *observed) get() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := map[string]int{}
	for k, v := range o.n {
		m[k] = v
	}
	return m
}

type env struct {
	srv *httptest.Server
	f   *follower
	obs *observed
}

// newEnv serves a Handler with testSecret that follows repo at ref, at
// /hooks/ of a real HTTP server, the way the server mounts it.
func newEnv(t *testing.T, secret []byte, repo, ref string) *env {
	t.Helper()
	e := &env{f: &follower{url: repo, ref: ref}, obs: &observed{}}
	h, err := New(Options{Secret: secret, Trigger: e.f, Observe: e.obs.observe})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, h)
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// reply is a decoded answer.
type reply struct {
	Code   int
	Header http.Header
	Answer Answer
	Err    api.Error
	Raw    string
}

func (e *env) post(t *testing.T, path string, header map[string]string, body []byte) reply {
	t.Helper()
	return e.do(t, http.MethodPost, path, header, bytes.NewReader(body))
}

func (e *env) do(t *testing.T, method, path string, header map[string]string, body io.Reader) reply {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{Code: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	if method == http.MethodHead {
		return r
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q, want application/json; body %s", method, path, ct, raw)
	}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(raw, &r.Err); err != nil {
			t.Fatalf("%s %s: error body %s: %v", method, path, raw, err)
		}
		if r.Err.Status != api.StatusFailure || r.Err.Code != resp.StatusCode || r.Err.Reason != api.ReasonFor(resp.StatusCode) || r.Err.Message == "" {
			t.Fatalf("%s %s: error body %s does not have the api.Error shape for %d", method, path, raw, resp.StatusCode)
		}
	} else if err := json.Unmarshal(raw, &r.Answer); err != nil {
		t.Fatalf("%s %s: body %s: %v", method, path, raw, err)
	}
	return r
}

func signed(secret, body []byte, extra map[string]string) map[string]string {
	h := map[string]string{SignatureHeader: Sign(secret, body), "Content-Type": "application/json"}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// githubPushBody is a GitHub push payload, trimmed to the fields around
// the ones the handler reads.
func githubPushBody(ref string) []byte {
	return []byte(`{
  "ref": "` + ref + `",
  "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
  "after": "0000000000000000000000000000000000000000",
  "repository": {
    "id": 186853002,
    "name": "infra",
    "full_name": "acme/infra",
    "private": true,
    "owner": {"login": "acme", "id": 21031067},
    "html_url": "https://github.com/acme/infra",
    "url": "https://github.com/acme/infra",
    "git_url": "git://github.com/acme/infra.git",
    "ssh_url": "git@github.com:acme/infra.git",
    "clone_url": "https://github.com/acme/infra.git",
    "default_branch": "main"
  },
  "pusher": {"name": "octo", "email": "octo@example.com"},
  "sender": {"login": "octo"},
  "created": false,
  "deleted": false,
  "forced": false,
  "commits": [{"id": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", "message": "scale workers", "added": [], "removed": [], "modified": ["tenants/prod.yaml"]}],
  "head_commit": {"id": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}
}`)
}

// giteaPushBody is a Gitea/Forgejo push payload on a server with its own
// HTTP and SSH ports.
func giteaPushBody(ref string) []byte {
	return []byte(`{
  "ref": "` + ref + `",
  "before": "28e1879d029cb852e4844d9c718537df08844e03",
  "after": "bffeb74224043ba2feb48d137756c8a9331c449a",
  "compare_url": "http://forge.example.com:3000/acme/infra/compare/28e1879d...bffeb742",
  "commits": [{"id": "bffeb74224043ba2feb48d137756c8a9331c449a", "message": "add worker pool\n", "url": "http://forge.example.com:3000/acme/infra/commit/bffeb742"}],
  "repository": {
    "id": 140,
    "owner": {"id": 1, "login": "acme", "username": "acme"},
    "name": "infra",
    "full_name": "acme/infra",
    "private": false,
    "html_url": "http://forge.example.com:3000/acme/infra",
    "ssh_url": "ssh://git@forge.example.com:2222/acme/infra.git",
    "clone_url": "http://forge.example.com:3000/acme/infra.git",
    "default_branch": "main"
  },
  "pusher": {"id": 1, "login": "acme"},
  "sender": {"id": 1, "login": "acme"}
}`)
}

// gitlabPushBody is a GitLab push payload, trimmed.
func gitlabPushBody(ref string) []byte {
	return []byte(`{
  "object_kind": "push",
  "event_name": "push",
  "before": "95790bf891e76fee5e1747ab589903a6a1f80f22",
  "after": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
  "ref": "` + ref + `",
  "checkout_sha": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
  "user_username": "jsmith",
  "project_id": 15,
  "project": {
    "id": 15,
    "name": "Infra",
    "web_url": "https://gitlab.example.com/platform/infra",
    "git_ssh_url": "git@gitlab.example.com:platform/infra.git",
    "git_http_url": "https://gitlab.example.com/platform/infra.git",
    "namespace": "Platform",
    "path_with_namespace": "platform/infra",
    "default_branch": "main"
  },
  "repository": {"name": "Infra", "url": "git@gitlab.example.com:platform/infra.git"},
  "commits": [],
  "total_commits_count": 0
}`)
}

func (f *follower) callList() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}
