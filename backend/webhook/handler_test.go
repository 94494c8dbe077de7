package webhook

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGitHubPush(t *testing.T) {
	e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
	body := githubPushBody("refs/heads/main")
	r := e.post(t, "/hooks/github", signed(testSecret, body, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "72d3162e"}), body)
	if r.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.Code, r.Raw)
	}
	want := Answer{Status: ResultAccepted, Repository: "https://github.com/acme/infra.git", Ref: "refs/heads/main"}
	if diff := cmp.Diff(want, r.Answer); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]call{{"https://github.com/acme/infra.git", "refs/heads/main"}}, e.f.fires()); diff != "" {
		t.Errorf("triggers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"github/accepted": 1}, e.obs.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestGitHubPushFormEncoded(t *testing.T) {
	e := newEnv(t, testSecret, "git@github.com:acme/infra.git", "refs/heads/main")
	body := []byte("payload=" + url.QueryEscape(string(githubPushBody("refs/heads/main"))))
	r := e.post(t, "/hooks/github", signed(testSecret, body, map[string]string{
		"X-GitHub-Event": "push",
		"Content-Type":   "application/x-www-form-urlencoded",
	}), body)
	if r.Code != http.StatusAccepted || r.Answer.Status != ResultAccepted {
		t.Fatalf("status %d: %s", r.Code, r.Raw)
	}
	if got := e.f.fires(); len(got) != 1 || got[0].Ref != "refs/heads/main" {
		t.Fatalf("triggers %v", got)
	}

	empty := []byte("other=1")
	r = e.post(t, "/hooks/github", signed(testSecret, empty, map[string]string{
		"X-GitHub-Event": "push",
		"Content-Type":   "application/x-www-form-urlencoded",
	}), empty)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Err.Message, "no payload field") {
		t.Fatalf("form without payload: %d %s", r.Code, r.Raw)
	}
	if len(e.f.fires()) != 1 {
		t.Fatalf("a bad form triggered")
	}
}

// Gitea and Forgejo send the same signature header and payload shape as
// GitHub, under event headers of their own.
func TestGiteaAndForgejoPush(t *testing.T) {
	for _, tc := range []struct {
		name    string
		follow  string
		headers map[string]string
		want    string
	}{
		{
			name:   "gitea",
			follow: "http://forge.example.com:3000/acme/infra",
			headers: map[string]string{
				"X-Gitea-Event": "push", "X-Gogs-Event": "push", "X-GitHub-Event": "push",
				"X-Gitea-Delivery": "f6266f16-1bf3-46a5-9ea4-602e06ead473",
			},
			want: "http://forge.example.com:3000/acme/infra.git",
		},
		{
			name:    "forgejo",
			follow:  "http://forge.example.com:3000/acme/infra.git",
			headers: map[string]string{"X-Forgejo-Event": "push"},
			want:    "http://forge.example.com:3000/acme/infra.git",
		},
		{
			name:    "followed over ssh on its own port",
			follow:  "ssh://git@forge.example.com:2222/acme/infra",
			headers: map[string]string{"X-Forgejo-Event": "push", "X-Gitea-Event": "push"},
			want:    "ssh://git@forge.example.com:2222/acme/infra.git",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, testSecret, tc.follow, "refs/heads/main")
			body := giteaPushBody("refs/heads/main")
			r := e.post(t, "/hooks/github", signed(testSecret, body, tc.headers), body)
			if r.Code != http.StatusAccepted || r.Answer.Status != ResultAccepted {
				t.Fatalf("status %d: %s", r.Code, r.Raw)
			}
			if diff := cmp.Diff([]call{{tc.want, "refs/heads/main"}}, e.f.fires()); diff != "" {
				t.Errorf("triggers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGitLab(t *testing.T) {
	e := newEnv(t, testSecret, "git@gitlab.example.com:platform/infra.git", "")
	body := gitlabPushBody("refs/heads/main")
	good := map[string]string{TokenHeader: string(testSecret), "X-Gitlab-Event": "Push Hook", "Content-Type": "application/json"}
	r := e.post(t, "/hooks/gitlab", good, body)
	if r.Code != http.StatusAccepted || r.Answer.Status != ResultAccepted {
		t.Fatalf("good token: %d %s", r.Code, r.Raw)
	}
	if diff := cmp.Diff([]call{{"https://gitlab.example.com/platform/infra.git", "refs/heads/main"}}, e.f.fires()); diff != "" {
		t.Fatalf("triggers (-want +got):\n%s", diff)
	}

	tag := gitlabPushBody("refs/tags/v1.2.0")
	r = e.post(t, "/hooks/gitlab", map[string]string{TokenHeader: string(testSecret), "X-Gitlab-Event": "Tag Push Hook"}, tag)
	if r.Code != http.StatusAccepted || r.Answer.Ref != "refs/tags/v1.2.0" {
		t.Fatalf("tag push: %d %s", r.Code, r.Raw)
	}

	for name, h := range map[string]map[string]string{
		"bad token":          {TokenHeader: "s3cr3t-webhook-keY", "X-Gitlab-Event": "Push Hook"},
		"token prefix":       {TokenHeader: string(testSecret[:5]), "X-Gitlab-Event": "Push Hook"},
		"token with suffix":  {TokenHeader: string(testSecret) + "x", "X-Gitlab-Event": "Push Hook"},
		"empty token":        {TokenHeader: "", "X-Gitlab-Event": "Push Hook"},
		"missing token":      {"X-Gitlab-Event": "Push Hook"},
		"github signature":   {SignatureHeader: Sign(testSecret, body), "X-Gitlab-Event": "Push Hook"},
		"bad token, no push": {TokenHeader: "nope", "X-Gitlab-Event": "Issue Hook"},
	} {
		r := e.post(t, "/hooks/gitlab", h, body)
		if r.Code != http.StatusUnauthorized || !strings.Contains(r.Err.Message, TokenHeader) {
			t.Errorf("%s: %d %s", name, r.Code, r.Raw)
		}
	}
	if n := len(e.f.fires()); n != 2 {
		t.Fatalf("%d triggers after bad tokens, want the 2 good ones", n)
	}

	r = e.post(t, "/hooks/gitlab", map[string]string{TokenHeader: string(testSecret), "X-Gitlab-Event": "Merge Request Hook"}, []byte(`{"object_kind":"merge_request"}`))
	if r.Code != http.StatusAccepted || r.Answer.Status != ResultIgnored || !strings.Contains(r.Answer.Message, "Merge Request Hook") {
		t.Fatalf("merge request event: %d %s", r.Code, r.Raw)
	}
	r = e.post(t, "/hooks/gitlab", map[string]string{TokenHeader: string(testSecret)}, body)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Err.Message, "X-Gitlab-Event") {
		t.Fatalf("no event header: %d %s", r.Code, r.Raw)
	}
	if n := len(e.f.callList()); n != 2 {
		t.Fatalf("Trigger called %d times, want 2", n)
	}
	want := map[string]int{"gitlab/accepted": 2, "gitlab/unauthorized": 7, "gitlab/ignored": 1, "gitlab/bad_request": 1}
	if diff := cmp.Diff(want, e.obs.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestGeneric(t *testing.T) {
	e := newEnv(t, testSecret, "git://127.0.0.1:9418/infra.git", "refs/heads/main")
	binary := make([]byte, 4096)
	rand.Read(binary)
	// Not a JSON object: a body whose first byte past white space is '{'
	// is read as one (1 random body in 256 would be).
	binary[0] = 0xfe
	for _, tc := range []struct {
		name   string
		body   []byte
		code   int
		status string
		want   []call
	}{
		{"arbitrary bytes", binary, 202, ResultAccepted, []call{{"", ""}}},
		{"empty body", nil, 202, ResultAccepted, []call{{"", ""}}},
		{"text", []byte("deploy please\n"), 202, ResultAccepted, []call{{"", ""}}},
		{"json array", []byte(`["infra"]`), 202, ResultAccepted, []call{{"", ""}}},
		{"repository and ref", []byte(`{"repository":"git://127.0.0.1/infra","ref":"refs/heads/main"}`), 202, ResultAccepted, []call{{"git://127.0.0.1/infra", "refs/heads/main"}}},
		{"ref only", []byte(` {"ref":"refs/heads/main"}`), 202, ResultAccepted, []call{{"", "refs/heads/main"}}},
		{"other repository", []byte(`{"repository":"https://github.com/acme/other"}`), 202, ResultIgnored, nil},
		{"other ref", []byte(`{"ref":"refs/heads/dev"}`), 202, ResultIgnored, nil},
		{"broken json", []byte(`{"repository":`), 400, "", nil},
		{"wrong type", []byte(`{"repository":42}`), 400, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.f.fires())
			r := e.post(t, "/hooks/generic", signed(testSecret, tc.body, nil), tc.body)
			if r.Code != tc.code || r.Answer.Status != tc.status {
				t.Fatalf("got %d %s, want %d %q", r.Code, r.Raw, tc.code, tc.status)
			}
			if tc.status == ResultIgnored && r.Answer.Message != MessageOtherRepository {
				t.Errorf("message %q, want %q", r.Answer.Message, MessageOtherRepository)
			}
			if tc.code == 400 && !strings.Contains(r.Err.Message, "generic hook") {
				t.Errorf("message %q does not say which payload", r.Err.Message)
			}
			if diff := cmp.Diff(tc.want, e.f.fires()[before:], cmp.Comparer(func(a, b []call) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal([]call(a), []call(b)) })); diff != "" {
				t.Errorf("triggers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadSignatures(t *testing.T) {
	body := githubPushBody("refs/heads/main")
	sha1mac := func() string {
		m := sha1.New()
		m.Write(body)
		return "sha1=" + hex.EncodeToString(m.Sum(nil))
	}()
	good := Sign(testSecret, body)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		msg     string
	}{
		{"missing", nil, "missing X-Hub-Signature-256"},
		{"wrong", map[string]string{SignatureHeader: "sha256=" + strings.Repeat("ab", 32)}, "does not match the body"},
		{"other body", map[string]string{SignatureHeader: Sign(testSecret, githubPushBody("refs/heads/dev"))}, "does not match the body"},
		{"other secret", map[string]string{SignatureHeader: Sign([]byte("s3cr3t-webhook-keY"), body)}, "does not match the body"},
		{"empty secret", map[string]string{SignatureHeader: Sign(nil, body)}, "does not match the body"},
		{"short hex", map[string]string{SignatureHeader: good[:len(good)-2]}, "64 hex digits"},
		{"long hex", map[string]string{SignatureHeader: good + "00"}, "64 hex digits"},
		{"odd hex", map[string]string{SignatureHeader: good[:len(good)-1]}, "64 hex digits"},
		{"not hex", map[string]string{SignatureHeader: "sha256=" + strings.Repeat("zz", 32)}, "64 hex digits"},
		{"no prefix", map[string]string{SignatureHeader: strings.TrimPrefix(good, "sha256=")}, "sha256=<hex>"},
		{"upper prefix", map[string]string{SignatureHeader: "SHA256=" + strings.TrimPrefix(good, "sha256=")}, "sha256=<hex>"},
		{"sha1 prefix", map[string]string{SignatureHeader: sha1mac}, `not "sha1="`},
		{"sha1 header only", map[string]string{"X-Hub-Signature": sha1mac}, "X-Hub-Signature (HMAC-SHA1) is not"},
		{"empty", map[string]string{SignatureHeader: ""}, "sha256=<hex>"},
		{"gitlab token", map[string]string{TokenHeader: string(testSecret)}, "missing X-Hub-Signature-256"},
		{"secret as signature", map[string]string{SignatureHeader: "sha256=" + hex.EncodeToString(testSecret)}, "64 hex digits"},
	} {
		for _, hook := range []string{"github", "generic"} {
			t.Run(tc.name+"/"+hook, func(t *testing.T) {
				e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
				h := map[string]string{"X-GitHub-Event": "push"}
				for k, v := range tc.headers {
					h[k] = v
				}
				r := e.post(t, "/hooks/"+hook, h, body)
				if r.Code != http.StatusUnauthorized {
					t.Fatalf("status %d: %s", r.Code, r.Raw)
				}
				if !strings.Contains(r.Err.Message, tc.msg) {
					t.Errorf("message %q does not contain %q", r.Err.Message, tc.msg)
				}
				if strings.Contains(r.Raw, string(testSecret)) || strings.Contains(r.Raw, strings.TrimPrefix(good, "sha256=")) {
					t.Errorf("answer reveals the secret or the right signature: %s", r.Raw)
				}
				if len(e.f.callList()) != 0 {
					t.Errorf("Trigger called: %v", e.f.callList())
				}
				if diff := cmp.Diff(map[string]int{hook + "/unauthorized": 1}, e.obs.get()); diff != "" {
					t.Errorf("observed (-want +got):\n%s", diff)
				}
			})
		}
	}

	t.Run("two signature headers", func(t *testing.T) {
		e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/hooks/github", bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Add(SignatureHeader, good)
		req.Header.Add(SignatureHeader, "sha256="+strings.Repeat("00", 32))
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(e.f.callList()) != 0 {
			t.Fatalf("status %d, calls %v", resp.StatusCode, e.f.callList())
		}
	})
}

// chunked hides a reader's length, so the client sends it chunked.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
	over := bytes.Repeat([]byte("x"), MaxBodyBytes+1)
	r := e.post(t, "/hooks/generic", signed(testSecret, over, nil), over)
	if r.Code != http.StatusRequestEntityTooLarge || !strings.Contains(r.Err.Message, "1048577 bytes") {
		t.Fatalf("with Content-Length: %d %s", r.Code, r.Raw)
	}
	r = e.do(t, http.MethodPost, "/hooks/generic", signed(testSecret, over, nil), chunked{bytes.NewReader(over)})
	if r.Code != http.StatusRequestEntityTooLarge || !strings.Contains(r.Err.Message, "over the limit of 1048576 bytes") {
		t.Fatalf("chunked: %d %s", r.Code, r.Raw)
	}
	r = e.post(t, "/hooks/github", signed(testSecret, over, map[string]string{"X-GitHub-Event": "push"}), over)
	if r.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("github: %d %s", r.Code, r.Raw)
	}
	if len(e.f.callList()) != 0 {
		t.Fatalf("Trigger called for bodies over the limit: %v", e.f.callList())
	}

	limit := bytes.Repeat([]byte("y"), MaxBodyBytes)
	r = e.do(t, http.MethodPost, "/hooks/generic", signed(testSecret, limit, nil), chunked{bytes.NewReader(limit)})
	if r.Code != http.StatusAccepted {
		t.Fatalf("body of exactly the limit, chunked: %d %s", r.Code, r.Raw)
	}
	r = e.post(t, "/hooks/generic", signed(testSecret, limit, nil), limit)
	if r.Code != http.StatusAccepted {
		t.Fatalf("body of exactly the limit: %d %s", r.Code, r.Raw)
	}
	if diff := cmp.Diff(map[string]int{"generic/too_large": 2, "github/too_large": 1, "generic/accepted": 2}, e.obs.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead, "LOCK"} {
		r := e.do(t, m, "/hooks/github", nil, nil)
		if r.Code != http.StatusMethodNotAllowed || r.Header.Get("Allow") != http.MethodPost {
			t.Errorf("%s: %d Allow=%q %s", m, r.Code, r.Header.Get("Allow"), r.Raw)
		}
		if m != http.MethodHead && !strings.Contains(r.Err.Message, "method "+m+" is not allowed") {
			t.Errorf("%s: message %q", m, r.Err.Message)
		}
	}
	if len(e.f.callList()) != 0 {
		t.Fatal("Trigger called")
	}
}

func TestUnknownHook(t *testing.T) {
	e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
	body := []byte("{}")
	for _, p := range []string{"/hooks/bitbucket", "/hooks/", "/hooks/github/", "/hooks/github/x", "/hooks/GitHub", "/hooks/generic.json"} {
		r := e.post(t, p, signed(testSecret, body, nil), body)
		if r.Code != http.StatusNotFound || !strings.Contains(r.Err.Message, "/hooks/github") {
			t.Errorf("%s: %d %s", p, r.Code, r.Raw)
		}
	}
	if len(e.f.callList()) != 0 {
		t.Fatal("Trigger called")
	}
	if diff := cmp.Diff(map[string]int{"unknown/not_found": 6}, e.obs.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestNonPushEvents(t *testing.T) {
	e := newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1,"repository":{"clone_url":"https://github.com/acme/infra.git"}}`)
	r := e.post(t, "/hooks/github", signed(testSecret, ping, map[string]string{"X-GitHub-Event": "ping"}), ping)
	if r.Code != http.StatusOK || r.Answer.Status != "pong" {
		t.Fatalf("ping: %d %s", r.Code, r.Raw)
	}
	r = e.post(t, "/hooks/github", map[string]string{"X-GitHub-Event": "ping", SignatureHeader: Sign([]byte("wrong"), ping)}, ping)
	if r.Code != http.StatusUnauthorized {
		t.Fatalf("unsigned ping: %d %s", r.Code, r.Raw)
	}
	issues := []byte(`{"action":"opened","repository":{"clone_url":"https://github.com/acme/infra.git"}}`)
	r = e.post(t, "/hooks/github", signed(testSecret, issues, map[string]string{"X-GitHub-Event": "issues"}), issues)
	if r.Code != http.StatusAccepted || r.Answer.Status != ResultIgnored || r.Answer.Message != `ignored: event "issues" is not a push` {
		t.Fatalf("issues: %d %s", r.Code, r.Raw)
	}
	r = e.post(t, "/hooks/github", signed(testSecret, issues, nil), issues)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Err.Message, "X-GitHub-Event") {
		t.Fatalf("no event header: %d %s", r.Code, r.Raw)
	}
	if len(e.f.callList()) != 0 {
		t.Fatalf("Trigger called: %v", e.f.callList())
	}
	want := map[string]int{"github/pong": 1, "github/unauthorized": 1, "github/ignored": 1, "github/bad_request": 1}
	if diff := cmp.Diff(want, e.obs.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestOtherRepository(t *testing.T) {
	e := newEnv(t, testSecret, "https://github.com/acme/platform", "refs/heads/main")
	body := githubPushBody("refs/heads/main")
	r := e.post(t, "/hooks/github", signed(testSecret, body, map[string]string{"X-GitHub-Event": "push"}), body)
	want := Answer{Status: ResultIgnored, Message: MessageOtherRepository, Repository: "https://github.com/acme/infra.git", Ref: "refs/heads/main"}
	if r.Code != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.Code, r.Raw)
	}
	if diff := cmp.Diff(want, r.Answer); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	// clone_url, html_url and ssh_url normalise alike: one question.
	if diff := cmp.Diff([]call{{"https://github.com/acme/infra.git", "refs/heads/main"}}, e.f.callList()); diff != "" {
		t.Errorf("Trigger calls (-want +got):\n%s", diff)
	}
	if len(e.f.fires()) != 0 {
		t.Fatal("triggered a fetch for another repository")
	}

	e = newEnv(t, testSecret, "https://github.com/acme/infra", "refs/heads/main")
	body = githubPushBody("refs/heads/feature")
	r = e.post(t, "/hooks/github", signed(testSecret, body, map[string]string{"X-GitHub-Event": "push"}), body)
	if r.Code != http.StatusAccepted || r.Answer.Status != ResultIgnored || len(e.f.fires()) != 0 {
		t.Fatalf("other branch: %d %s", r.Code, r.Raw)
	}

	body = []byte(`{"ref":"refs/heads/main","repository":{"name":"infra"}}`)
	r = e.post(t, "/hooks/github", signed(testSecret, body, map[string]string{"X-GitHub-Event": "push"}), body)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Err.Message, "names no repository") {
		t.Fatalf("no URLs: %d %s", r.Code, r.Raw)
	}
	body = []byte(`{"ref":7}`)
	r = e.post(t, "/hooks/github", signed(testSecret, body, map[string]string{"X-GitHub-Event": "push"}), body)
	if r.Code != http.StatusBadRequest || !strings.Contains(r.Err.Message, "push payload is not valid JSON") {
		t.Fatalf("ref of the wrong type: %d %s", r.Code, r.Raw)
	}
}

func TestNoSecret(t *testing.T) {
	for _, secret := range [][]byte{nil, {}} {
		e := newEnv(t, secret, "https://github.com/acme/infra", "refs/heads/main")
		body := githubPushBody("refs/heads/main")
		for _, hook := range []string{"github", "generic"} {
			r := e.post(t, "/hooks/"+hook, signed(secret, body, map[string]string{"X-GitHub-Event": "push"}), body)
			if r.Code != http.StatusServiceUnavailable || !strings.Contains(r.Err.Message, "webhooks are disabled") || !strings.Contains(r.Err.Message, SecretEnv) {
				t.Fatalf("%s: %d %s", hook, r.Code, r.Raw)
			}
		}
		r := e.post(t, "/hooks/gitlab", map[string]string{TokenHeader: "", "X-Gitlab-Event": "Push Hook"}, gitlabPushBody("refs/heads/main"))
		if r.Code != http.StatusServiceUnavailable {
			t.Fatalf("gitlab with an empty token: %d %s", r.Code, r.Raw)
		}
		if len(e.f.callList()) != 0 {
			t.Fatal("Trigger called without a secret")
		}
		if diff := cmp.Diff(map[string]int{"github/disabled": 1, "generic/disabled": 1, "gitlab/disabled": 1}, e.obs.get()); diff != "" {
			t.Errorf("observed (-want +got):\n%s", diff)
		}
	}
}

func TestNewNeedsTrigger(t *testing.T) {
	if _, err := New(Options{Secret: testSecret}); err == nil || !strings.Contains(err.Error(), "Trigger") {
		t.Fatalf("New without Trigger: %v", err)
	}
}

// The handler copies the secret: a caller that wipes its own copy does
// not change what the handler accepts.
func TestSecretCopied(t *testing.T) {
	secret := append([]byte(nil), testSecret...)
	f := &follower{url: "x"}
	h, err := New(Options{Secret: secret, Trigger: f})
	if err != nil {
		t.Fatal(err)
	}
	clear(secret)
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/generic", strings.NewReader("go"))
	req.Header.Set(SignatureHeader, Sign(testSecret, []byte("go")))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || len(f.fires()) != 1 {
		t.Fatalf("status %d, fires %v", resp.StatusCode, f.fires())
	}
}

// The log names hooks, results and repositories, never the secret, a
// signature or a body.
func TestLogKeepsSecrets(t *testing.T) {
	var buf bytes.Buffer
	f := &follower{url: "https://github.com/acme/infra", ref: "refs/heads/main"}
	h, err := New(Options{Secret: testSecret, Trigger: f, Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := githubPushBody("refs/heads/main")
	send := func(path string, hdr map[string]string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send("/hooks/github", signed(testSecret, body, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-123"}))
	send("/hooks/github", map[string]string{"X-GitHub-Event": "push", SignatureHeader: Sign([]byte("guess"), body)})
	send("/hooks/gitlab", map[string]string{"X-Gitlab-Event": "Push Hook", TokenHeader: string(testSecret) + "-almost"})
	log := buf.String()
	for _, secret := range []string{string(testSecret), strings.TrimPrefix(Sign(testSecret, body), "sha256="), "scale workers"} {
		if strings.Contains(log, secret) {
			t.Errorf("log contains %q:\n%s", secret, log)
		}
	}
	for _, want := range []string{"webhook accepted", "delivery=d-123", "repository=https://github.com/acme/infra.git", "webhook refused", "does not match"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}
