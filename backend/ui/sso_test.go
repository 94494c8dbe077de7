package ui

import (
	"bytes"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/sso"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

// ssoRig is a dashboard with single sign-on at a real provider, a clock
// of its sessions that the test moves, and its audit log.
type ssoRig struct {
	*rig
	p     *oidctest.Provider
	audit *syncBuffer
	mu    sync.Mutex
	now   time.Time
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newSSORig(t testing.TB) *ssoRig {
	t.Helper()
	p := oidctest.Start(t, oidctest.Options{RedirectURIs: []string{"http://example.com" + ssoCallbackPath}, Users: []oidctest.User{
		{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"platform"}},
		{Username: "bob", Password: "pw-bob", Email: "bob@example.org", Groups: []string{"sales"}},
	}})
	roles, _ := sso.ParseRoleMap("platform-admins=admin,platform=edit")
	c, err := sso.New(t.Context(), sso.Config{Issuer: p.Issuer, ClientID: p.WebClientID, ClientSecret: p.WebClientSecret,
		Scopes: append(slices.Clone(sso.DefaultScopes), "offline_access"), Roles: roles})
	if err != nil {
		t.Fatal(err)
	}
	sr := &ssoRig{p: p, audit: &syncBuffer{}, now: time.Now()}
	sr.rig = newRig(t, rigOptions{ui: Options{SSO: c}, clock: sr.clock})
	sr.srv.Tokens().Require()
	sr.srv.SetAudit(slog.New(slog.NewTextHandler(sr.audit, nil)))
	return sr
}

func (sr *ssoRig) clock() time.Time {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	return sr.now
}

func (sr *ssoRig) advance(d time.Duration) {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	sr.now = sr.now.Add(d)
}

// signIn goes through the start, the provider's login form and the
// callback, and returns the callback's answer.
func (sr *ssoRig) signIn(t testing.TB, user, password, next string) *http.Response {
	t.Helper()
	resp := sr.do("GET", ssoStartPath+"?next="+url.QueryEscape(next), nil, "")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the start answered %s", resp.Status)
	}
	var flow *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == ssoFlowCookie {
			flow = c
		}
	}
	if flow == nil || !flow.HttpOnly || flow.SameSite != http.SameSiteLaxMode || flow.Path != ssoStartPath {
		t.Fatalf("the start sets the flow cookie %+v", flow)
	}
	authURL := resp.Header.Get("Location")
	if !strings.HasPrefix(authURL, sr.p.Issuer+"/") || !strings.Contains(authURL, "code_challenge_method=S256") {
		t.Fatalf("the start sends to %q", authURL)
	}
	back, err := sr.p.Login(t.Context(), authURL, user, password)
	if err != nil {
		t.Fatal(err)
	}
	return sr.do("GET", back.RequestURI(), cookieHeader(flow), "")
}

func sessionCookie(t testing.TB, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == backend.SessionCookie && c.Value != "" {
			return c
		}
	}
	t.Fatal("no session cookie")
	return nil
}

func TestSSOLogin(t *testing.T) {
	sr := newSSORig(t)
	contains(t, "login page", body(t, sr.do("GET", "/login?next=%2Fcommits", nil, ""), http.StatusOK),
		`href="/login/sso?next=%2Fcommits"`)

	resp := sr.signIn(t, "alice", "pw-alice", "/commits")
	body(t, resp, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); loc != "/commits" {
		t.Fatalf("the callback sends to %q", loc)
	}
	c := sessionCookie(t, resp)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v", c)
	}
	page := body(t, sr.do("GET", "/", cookieHeader(c), ""), http.StatusOK)
	contains(t, "overview", page, "alice@example.org <small>edit</small>")
	body(t, sr.do("GET", "/api/v1/tenants", cookieHeader(c), ""), http.StatusOK)

	a := sr.audit.String()
	for _, want := range []string{`msg=login who=alice@example.org source=oidc subject=alice email=alice@example.org method=oidc role=edit`} {
		if !strings.Contains(a, want) {
			t.Errorf("audit log lacks %q:\n%s", want, a)
		}
	}

	// Logout ends the session here and sends the browser to the
	// provider's end-session endpoint.
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no logout form")
	}
	out := body(t, sr.do("POST", "/logout", cookieHeader(c), url.Values{"csrf": {csrf[1]}}.Encode()), http.StatusOK)
	m := regexp.MustCompile(`url=([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("logout page:\n%s", out)
	}
	end, err := url.Parse(html.UnescapeString(m[1]))
	if err != nil || !strings.HasPrefix(end.String(), sr.p.Issuer+"/") || end.Query().Get("id_token_hint") == "" ||
		end.Query().Get("post_logout_redirect_uri") != "http://example.com/login" {
		t.Fatalf("logout sends to %q", m[1])
	}
	body(t, sr.do("GET", "/", cookieHeader(c), ""), http.StatusSeeOther)
	if a := sr.audit.String(); !strings.Contains(a, "msg=logout who=alice@example.org") {
		t.Errorf("no logout in the audit log:\n%s", a)
	}
	// The provider ends its session and sends the browser back.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noFollow.Get(end.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != "http://example.com/login" {
		t.Fatalf("the provider's end session answered %s, to %q", resp.Status, loc)
	}
}

func TestSSONoRole(t *testing.T) {
	sr := newSSORig(t)
	resp := sr.signIn(t, "bob", "pw-bob", "/")
	page := body(t, resp, http.StatusForbidden)
	contains(t, "refusal", page, "You signed in at the identity provider as bob@example.org, but none of your groups (sales) is given a role")
	for _, c := range resp.Cookies() {
		if c.Name == backend.SessionCookie && c.Value != "" {
			t.Fatal("a person without a role got a session")
		}
	}
	if a := sr.audit.String(); !strings.Contains(a, "msg=\"login refused\" who=bob@example.org source=oidc subject=bob email=bob@example.org method=oidc reason=no-role groups=sales") {
		t.Errorf("audit log:\n%s", a)
	}
}

func TestSSOCallbackRefusals(t *testing.T) {
	sr := newSSORig(t)
	// No flow cookie: the login page says why.
	page := body(t, sr.do("GET", ssoCallbackPath+"?code=x&state=y", nil, ""), http.StatusUnauthorized)
	contains(t, "no cookie", page, "Single sign-on failed: this browser&#39;s sign-in is unknown")
	// The provider's refusal.
	resp := sr.do("GET", ssoStartPath, nil, "")
	flow := resp.Cookies()[0]
	page = body(t, sr.do("GET", ssoCallbackPath+"?error=access_denied&state=y", cookieHeader(flow), ""), http.StatusUnauthorized)
	contains(t, "refused", page, "the provider refused the sign-in: access_denied")
	if a := sr.audit.String(); !strings.Contains(a, `msg="login failed" method=oidc reason=flow`) || !strings.Contains(a, "reason=refused") {
		t.Errorf("audit log:\n%s", a)
	}
	if strings.Contains(sr.audit.String(), "code=") {
		t.Error("the audit log holds a code")
	}
}

func TestSSORefreshRechecksRole(t *testing.T) {
	sr := newSSORig(t)
	c := sessionCookie(t, sr.signIn(t, "alice", "pw-alice", "/"))
	// After the ID token expired, the refresh carries new groups.
	sr.p.AddUser(oidctest.User{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"platform-admins"}})
	sr.advance(2 * time.Hour)
	contains(t, "after refresh", body(t, sr.do("GET", "/", cookieHeader(c), ""), http.StatusOK), "alice@example.org <small>admin</small>")
	// Groups that give no role end the session.
	sr.p.AddUser(oidctest.User{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"sales"}})
	sr.advance(2 * time.Hour)
	body(t, sr.do("GET", "/", cookieHeader(c), ""), http.StatusSeeOther)
	body(t, sr.do("GET", "/api/v1/tenants", cookieHeader(c), ""), http.StatusUnauthorized)
	a := sr.audit.String()
	for _, want := range []string{"msg=\"role changed\" who=alice@example.org source=oidc subject=alice email=alice@example.org method=oidc from=edit to=admin",
		"msg=\"session refused\" who=alice@example.org source=oidc subject=alice email=alice@example.org method=oidc reason=no-role"} {
		if !strings.Contains(a, want) {
			t.Errorf("audit log lacks %q:\n%s", want, a)
		}
	}
}

// BenchmarkSSOCallback measures the server's time of one sign-in's
// callback: the code exchange at the provider on loopback and the ID
// token's verification, with the keys cached.
func BenchmarkSSOCallback(b *testing.B) {
	sr := newSSORig(b)
	sessionCookie(b, sr.signIn(b, "alice", "pw-alice", "/")) // caches the keys
	for b.Loop() {
		b.StopTimer()
		resp := sr.do("GET", ssoStartPath, nil, "")
		flow := resp.Cookies()[0]
		back, err := sr.p.Login(b.Context(), resp.Header.Get("Location"), "alice", "pw-alice")
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if resp := sr.do("GET", back.RequestURI(), cookieHeader(flow), ""); resp.StatusCode != http.StatusSeeOther {
			b.Fatal(resp.Status)
		}
	}
}
