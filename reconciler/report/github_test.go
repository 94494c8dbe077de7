package report

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// request is what a forge test server saw of one request.
type request struct {
	Method, RequestURI string
	Header             http.Header
	Body               map[string]any
	RawBody            string
	At                 time.Time
}

// forge is an httptest server that records requests and answers each with
// the next of its responses (the last one repeats).
type forge struct {
	*httptest.Server
	mu        sync.Mutex
	requests  []request
	responses []func(w http.ResponseWriter, r *http.Request)
	arrived   chan struct{}
}

func newForge(t testing.TB, responses ...func(w http.ResponseWriter, r *http.Request)) *forge {
	t.Helper()
	f := &forge{responses: responses, arrived: make(chan struct{}, 1000)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := request{At: time.Now(), Method: r.Method, RequestURI: r.RequestURI, Header: r.Header.Clone(), RawBody: string(raw)}
		json.Unmarshal(raw, &req.Body)
		f.mu.Lock()
		f.requests = append(f.requests, req)
		respond := f.responses[min(len(f.requests), len(f.responses))-1]
		f.mu.Unlock()
		f.arrived <- struct{}{}
		respond(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *forge) got() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

// wait blocks until n more requests have arrived.
func (f *forge) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("the forge got %d requests, waiting for more", len(f.got()))
		}
	}
}

func status(code int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, `{"id":1}`)
	}
}

func answer(code int, header http.Header, body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

const ghToken = "ghp_TESTTOKEN0123456789"

func newTestGitHub(t *testing.T, api string) *GitHub {
	t.Helper()
	g, err := NewGitHub(GitHubOptions{APIURL: api, RepoURL: "git@github.com:acme/infra.git", Token: ghToken})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGitHubRequest(t *testing.T) {
	f := newForge(t, status(http.StatusCreated))
	g := newTestGitHub(t, f.URL+"/")
	if g.Name() != "github:acme/infra" {
		t.Errorf("Name = %q", g.Name())
	}
	long := strings.Repeat("reason ", 30)
	for _, s := range []Status{
		{SHA: testSHA, Context: "rezuscloud/eu/prod", State: StateSuccess, Description: "applied: +2 ~0 -1",
			TargetURL: "https://rezus.example/api/v1/commits/" + testSHA},
		{SHA: testSHA, Context: "rezuscloud/eu/dev", State: StateRunning, Description: "applying"},
		{SHA: testSHA, Context: "rezuscloud/eu", State: StateError, Description: long},
	} {
		if err := g.Report(context.Background(), s); err != nil {
			t.Fatalf("Report: %v", err)
		}
	}
	got := f.got()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	for _, r := range got {
		if r.Method != http.MethodPost || r.RequestURI != "/repos/acme/infra/statuses/"+testSHA {
			t.Errorf("request %s %s", r.Method, r.RequestURI)
		}
		for k, want := range map[string]string{
			"Authorization":        "Bearer " + ghToken,
			"Accept":               "application/vnd.github+json",
			"X-Github-Api-Version": "2022-11-28",
			"User-Agent":           "rezuscloud",
			"Content-Type":         "application/json",
		} {
			if v := r.Header.Values(k); len(v) != 1 || v[0] != want {
				t.Errorf("header %s = %q, want %q", k, v, want)
			}
		}
	}
	want := []map[string]any{
		{"state": "success", "context": "rezuscloud/eu/prod", "description": "applied: +2 ~0 -1",
			"target_url": "https://rezus.example/api/v1/commits/" + testSHA},
		{"state": "pending", "context": "rezuscloud/eu/dev", "description": "applying"},
		{"state": "error", "context": "rezuscloud/eu", "description": truncate(long, 140)},
	}
	for i := range want {
		if diff := cmp.Diff(want[i], got[i].Body); diff != "" {
			t.Errorf("body %d (-want +got):\n%s", i, diff)
		}
	}
	if d := got[2].Body["description"].(string); len([]rune(d)) > 140 || !strings.HasSuffix(d, "…") {
		t.Errorf("long description sent as %q", d)
	}
}

func TestGiteaPath(t *testing.T) {
	f := newForge(t, status(http.StatusCreated))
	g, err := NewGitHub(GitHubOptions{APIURL: f.URL + "/api/v1", Owner: "acme", Repo: "infra", Token: ghToken})
	if err != nil {
		t.Fatal(err)
	}
	s := Status{SHA: testSHA, Context: "rezuscloud/eu", State: StateFailure, Description: "invalid: a.yaml:3: bad"}
	if err := g.Report(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if uri := f.got()[0].RequestURI; uri != "/api/v1/repos/acme/infra/statuses/"+testSHA {
		t.Errorf("request URI %s", uri)
	}
	if st := f.got()[0].Body["state"]; st != "failure" {
		t.Errorf("state %v", st)
	}
}

func TestGitHubOwnerRepoFromURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://github.com/acme/infra":              "github:acme/infra",
		"https://github.com/acme/infra.git":          "github:acme/infra",
		"https://user:pw@github.com/acme/infra.git/": "github:acme/infra",
		"ssh://git@github.com/acme/infra.git":        "github:acme/infra",
		"ssh://git@github.com:2222/acme/infra.git":   "github:acme/infra",
		"git@github.com:acme/infra.git":              "github:acme/infra",
		"git@gitea.example:acme/infra":               "github:acme/infra",
	} {
		g, err := NewGitHub(GitHubOptions{RepoURL: raw, Token: "t"})
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if g.Name() != want {
			t.Errorf("%s: Name = %q, want %q", raw, g.Name(), want)
		}
	}
	for raw, wantErr := range map[string]string{
		"https://github.com/acme":          "is not owner/repo",
		"https://github.com/a/b/c":         "is not owner/repo",
		"https://u:hunter2@github.com/":    "no owner/repository path",
		"github.com/acme/infra":            "want https://host/owner/repo",
		"https://github.com/acme/../infra": "not allowed",
		"https://github.com/%zz":           "invalid URL escape",
	} {
		_, err := NewGitHub(GitHubOptions{RepoURL: raw, Token: "t"})
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: err = %v, want %q", raw, err, wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
	}
	for _, opts := range []GitHubOptions{
		{Owner: "acme", Repo: "infra"}, // no token
		{Owner: "acme", Token: "t"},    // no repo
		{Token: "t"},                   // nothing to name the repository
		{Owner: "acme", Repo: "infra", Token: "t", APIURL: "ftp://x"},       // not http
		{Owner: "acme", Repo: "infra", Token: "t", APIURL: "https://u:p@x"}, // credentials in the URL
	} {
		if _, err := NewGitHub(opts); err == nil {
			t.Errorf("NewGitHub(%+v) accepted", opts)
		}
	}
	if _, err := NewGitHub(GitHubOptions{Owner: "acme", Repo: "infra"}); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token: %v", err)
	}
	if _, err := NewGitHub(GitHubOptions{Owner: "a", Repo: "b", Token: "t", APIURL: "https://u:secretpw@x"}); err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("credentials in the API URL: %v", err)
	}
}

func TestGitHubErrors(t *testing.T) {
	s := Status{SHA: testSHA, Context: "rezuscloud/eu", State: StateSuccess}
	tests := []struct {
		name       string
		respond    func(w http.ResponseWriter, r *http.Request)
		retryable  bool
		retryAfter time.Duration
		message    string
	}{
		{"unknown commit", answer(422, nil, `{"message":"No commit found for SHA: `+testSHA+`","documentation_url":"https://docs.github.com/rest"}`),
			false, 0, "No commit found for SHA: " + testSHA},
		{"bad token echoed", answer(401, nil, `{"message":"Bad credentials: Bearer `+ghToken+`"}`),
			false, 0, "Bad credentials: Bearer [redacted]"},
		{"server error", answer(502, nil, "<html>bad gateway</html>\n"), true, 0, "<html>bad gateway</html>"},
		{"rate limited", answer(429, http.Header{"Retry-After": {"7"}}, `{"message":"slow down"}`), true, 7 * time.Second, "slow down"},
		{"secondary rate limit", answer(403, http.Header{"Retry-After": {"60"}}, `{"message":"You have exceeded a secondary rate limit"}`),
			true, time.Minute, "You have exceeded a secondary rate limit"},
		{"forbidden", answer(403, nil, `{"message":"Resource not accessible by integration"}`), false, 0, "Resource not accessible by integration"},
		{"timeout", answer(408, nil, ""), true, 0, ""},
		{"huge retry-after", answer(503, http.Header{"Retry-After": {"99999999"}}, ""), true, time.Hour, ""},
		{"redirect", answer(http.StatusTemporaryRedirect, http.Header{"Location": {"https://elsewhere.example/x"}}, ""),
			false, 0, "redirected to https://elsewhere.example/x: set the API URL to where the API is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newForge(t, tt.respond)
			err := newTestGitHub(t, f.URL).Report(context.Background(), s)
			var he *HTTPError
			if !errors.As(err, &he) {
				t.Fatalf("err = %v, want an *HTTPError", err)
			}
			if he.Retryable() != tt.retryable || errors.Is(err, ErrPermanent) == tt.retryable {
				t.Errorf("retryable = %v, permanent = %v; want retryable %v", he.Retryable(), errors.Is(err, ErrPermanent), tt.retryable)
			}
			if he.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", he.RetryAfter, tt.retryAfter)
			}
			if he.Message != tt.message {
				t.Errorf("Message = %q, want %q", he.Message, tt.message)
			}
			if strings.Contains(err.Error(), ghToken) {
				t.Errorf("the error shows the token: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "github:acme/infra: POST "+f.URL+"/repos/acme/infra/statuses/"+testSHA+": ") {
				t.Errorf("error %q does not say who sent what where", err)
			}
			if len(f.got()) != 1 {
				t.Errorf("%d requests, want 1 (no redirect followed)", len(f.got()))
			}
		})
	}
}

func TestRateLimitReset(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	reset := now.Add(42 * time.Second).Unix()
	f := newForge(t, answer(403, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(reset, 10)}},
		`{"message":"API rate limit exceeded"}`))
	g := newTestGitHub(t, f.URL)
	g.p.now = func() time.Time { return now }
	err := g.Report(context.Background(), Status{SHA: testSHA, Context: "c", State: StateSuccess})
	var he *HTTPError
	if !errors.As(err, &he) || !he.RateLimited || !he.Retryable() || he.RetryAfter != 42*time.Second {
		t.Fatalf("err = %#v", err)
	}
	date := now.Add(90 * time.Second).UTC().Format(http.TimeFormat)
	f2 := newForge(t, answer(503, http.Header{"Retry-After": {date}}, ""))
	g2 := newTestGitHub(t, f2.URL)
	g2.p.now = func() time.Time { return now }
	err = g2.Report(context.Background(), Status{SHA: testSHA, Context: "c", State: StateSuccess})
	if !errors.As(err, &he) || he.RetryAfter != 90*time.Second {
		t.Fatalf("Retry-After as a date: %v", err)
	}
}

func TestReportRefusesMalformedStatus(t *testing.T) {
	f := newForge(t, status(http.StatusCreated))
	g := newTestGitHub(t, f.URL)
	err := g.Report(context.Background(), Status{SHA: "HEAD", Context: "c", State: StateSuccess})
	if !errors.Is(err, ErrPermanent) || !strings.Contains(err.Error(), `commit "HEAD" is not a full`) {
		t.Fatalf("err = %v", err)
	}
	if len(f.got()) != 0 {
		t.Fatal("a malformed status was sent")
	}
}

func TestNetworkErrorIsRetryable(t *testing.T) {
	f := newForge(t, status(http.StatusCreated))
	url := f.URL
	f.Close()
	err := newTestGitHub(t, url).Report(context.Background(), Status{SHA: testSHA, Context: "c", State: StateSuccess})
	if err == nil || errors.Is(err, ErrPermanent) {
		t.Fatalf("err = %v, want a retryable error", err)
	}
	if strings.Contains(err.Error(), ghToken) {
		t.Fatalf("the error shows the token: %v", err)
	}
}
