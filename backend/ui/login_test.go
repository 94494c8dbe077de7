package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// loginForm fetches the login page and returns its CSRF cookie and field.
func (r *rig) loginForm(t *testing.T) (*http.Cookie, string) {
	t.Helper()
	resp := r.do("GET", "/login?next=%2Ftenants%2Fproduction", nil, "")
	page := body(t, resp, 200)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("login page has no csrf field:\n%s", page)
	}
	for _, c := range resp.Cookies() {
		if c.Name == csrfCookie {
			return c, m[1]
		}
	}
	t.Fatalf("login page sets no %s cookie", csrfCookie)
	return nil, ""
}

// login logs in with secret and returns the session cookie.
func (r *rig) login(t *testing.T, secret string) *http.Cookie {
	t.Helper()
	c, field := r.loginForm(t)
	form := url.Values{"csrf": {field}, "token": {secret}, "next": {"/tenants/production"}}
	resp := r.do("POST", "/login", http.Header{"Cookie": {c.String()}, "Origin": {"http://example.com"}}, form.Encode())
	body(t, resp, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); loc != "/tenants/production" {
		t.Errorf("login sends to %q, want /tenants/production", loc)
	}
	for _, c := range resp.Cookies() {
		if c.Name == backend.SessionCookie {
			return c
		}
	}
	t.Fatal("login sets no session cookie")
	return nil
}

func cookieHeader(c *http.Cookie) http.Header {
	return http.Header{"Cookie": {(&http.Cookie{Name: c.Name, Value: c.Value}).String()}}
}

func TestLogin(t *testing.T) {
	r := filled(t, rigOptions{secrets: true, tokens: map[string]backend.Role{"viewer": backend.RoleView, "root": backend.RoleAdmin}})

	resp := r.do("GET", "/tenants/production", nil, "")
	body(t, resp, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); loc != "/login?next=%2Ftenants%2Fproduction" {
		t.Errorf("a page without a session sends to %q", loc)
	}
	if b := body(t, r.do("GET", "/?part=tenants", nil, ""), http.StatusUnauthorized); strings.Contains(b, "production") {
		t.Error("a fragment without a session shows the tenants")
	}

	t.Run("refused", func(t *testing.T) {
		c, field := r.loginForm(t)
		h := http.Header{"Cookie": {c.String()}}
		body(t, r.do("POST", "/login", h, url.Values{"csrf": {"forged"}, "token": {"secret-viewer"}}.Encode()), http.StatusForbidden)
		body(t, r.do("POST", "/login", nil, url.Values{"csrf": {field}, "token": {"secret-viewer"}}.Encode()), http.StatusForbidden)
		page := body(t, r.do("POST", "/login", h, url.Values{"csrf": {field}, "token": {"wrong"}}.Encode()), http.StatusUnauthorized)
		contains(t, "bad token", page, "That token is not valid.")
		h.Set("Origin", "https://evil.example")
		body(t, r.do("POST", "/login", h, url.Values{"csrf": {field}, "token": {"secret-viewer"}}.Encode()), http.StatusForbidden)
	})

	view := r.login(t, "secret-viewer")
	if !view.HttpOnly || view.SameSite != http.SameSiteStrictMode || view.Secure || view.Path != "/" || view.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure over http, Path=/, an expiry", view)
	}
	if strings.Contains(view.Value, "secret-viewer") {
		t.Error("the session cookie carries the token")
	}
	vh := cookieHeader(view)
	page := body(t, r.do("GET", "/tenants/production", vh, ""), 200)
	contains(t, "view session", page, "viewer", "Log out", `data-machine="production-workers-1"`)
	if strings.Contains(page, "kubeconfig") {
		t.Error("a view session sees the kubeconfig link")
	}
	machine := body(t, r.do("GET", "/tenants/production/machines/production-workers-1", vh, ""), 200)
	if strings.Contains(machine, "/config") {
		t.Error("a view session sees the config download")
	}

	// The cookie authenticates reads of the API, its watches' endpoints
	// and downloads (as the session's role), nothing else.
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/api/v1/tenants/production", 200},
		{"HEAD", "/api/v1/tenants", 200},
		{"GET", "/api/v1/tenants/production/machines/production-workers-1/config", http.StatusForbidden},
		{"GET", "/api/v1/tenants/production/kubeconfig", http.StatusForbidden},
		{"GET", "/tfstate/production", http.StatusUnauthorized},
		{"GET", "/api/v1/tfstate/production/versions", http.StatusUnauthorized},
		{"POST", "/api/v1/previews", http.StatusUnauthorized},
	} {
		if resp := r.do(c.method, c.path, vh, ""); resp.StatusCode != c.want {
			t.Errorf("%s %s with a view session: %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
	if resp := r.do("GET", "/api/v1/tenants", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API without credentials: %d", resp.StatusCode)
	}

	admin := cookieHeader(r.login(t, "secret-root"))
	b := body(t, r.do("GET", "/api/v1/tenants/production/machines/production-workers-1/config", admin, ""), 200)
	if b != "config of production/production-workers-1" {
		t.Errorf("admin download: %q", b)
	}
	contains(t, "admin session", body(t, r.do("GET", "/tenants/production/machines/production-workers-1", admin, ""), 200),
		`href="/api/v1/tenants/production/machines/production-workers-1/config"`)

	// Logout needs the session's CSRF token, then ends the session on the
	// server: the same cookie no longer works anywhere.
	body(t, r.do("POST", "/logout", vh, url.Values{"csrf": {"forged"}}.Encode()), http.StatusForbidden)
	token := csrfField.FindStringSubmatch(page)[1]
	resp = r.do("POST", "/logout", vh, url.Values{"csrf": {token}}.Encode())
	body(t, resp, http.StatusSeeOther)
	if c := resp.Cookies(); len(c) != 1 || c[0].Name != backend.SessionCookie || c[0].MaxAge >= 0 {
		t.Errorf("logout cookies %v: want the session cookie cleared", c)
	}
	if resp := r.do("GET", "/tenants/production", vh, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("page after logout: %d, want a redirect to the login page", resp.StatusCode)
	}
	if resp := r.do("GET", "/api/v1/tenants", vh, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API after logout: %d, want 401", resp.StatusCode)
	} else if strings.Contains(strings.Join(resp.Header.Values("WWW-Authenticate"), ","), "Basic") {
		t.Error("a request with a session cookie gets a Basic challenge, which makes browsers ask for a password")
	}
	// The admin's session lives on.
	body(t, r.do("GET", "/", admin, ""), 200)
}

// TestSessionEndsWithToken: a session lasts only as long as its token is
// in the tokens file.
func TestSessionEndsWithToken(t *testing.T) {
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView, "other": backend.RoleView}})
	vh := cookieHeader(r.login(t, "secret-viewer"))
	body(t, r.do("GET", "/", vh, ""), 200)
	writeTokens(t, r.tokens, map[string]backend.Role{"other": backend.RoleView})
	if err := r.srv.Tokens().Reload(); err != nil {
		t.Fatal(err)
	}
	if resp := r.do("GET", "/", vh, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("page after the token left the file: %d", resp.StatusCode)
	}
	if resp := r.do("GET", "/api/v1/tenants", vh, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("API after the token left the file: %d", resp.StatusCode)
	}
}

func TestSecureCookie(t *testing.T) {
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}, ui: Options{ExternalURL: "https://rezus.example"}})
	if c := r.login(t, "secret-viewer"); !c.Secure {
		t.Error("behind an https external URL the session cookie is not Secure")
	}
}

func TestOpenServer(t *testing.T) {
	r := filled(t, rigOptions{secrets: true})
	page := body(t, r.do("GET", "/tenants/production", nil, ""), 200)
	if strings.Contains(page, "Log out") {
		t.Error("a server without a tokens file shows a logout form")
	}
	contains(t, "open server", page, `href="/api/v1/tenants/production/kubeconfig"`)
	if resp := r.do("GET", "/login", nil, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("login page without a tokens file: %d, want a redirect", resp.StatusCode)
	}
}

// TestCrossSiteLink: a link from another site (a commit status on the
// forge) arrives without the SameSite=Strict cookie; the page navigates
// again from this site instead of asking to log in.
func TestCrossSiteLink(t *testing.T) {
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}})
	page := body(t, r.do("GET", "/commits/"+sha(3), http.Header{"Sec-Fetch-Site": {"cross-site"}}, ""), 200)
	contains(t, "bounce", page, `<meta http-equiv="refresh" content="0; url=/commits/`+sha(3)+`">`)
	if strings.Contains(page, "Break the manifests") {
		t.Error("the bounce page shows the commit")
	}
	resp := r.do("GET", "/commits/"+sha(3), http.Header{"Sec-Fetch-Site": {"same-origin"}}, "")
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("same-origin navigation without a session: %d, want the login redirect", resp.StatusCode)
	}
}

// TestSafeNext: the page a login goes on to is a path on this server;
// anything a browser could read as another origin goes to "/" instead.
func TestSafeNext(t *testing.T) {
	for _, c := range []struct{ next, want string }{
		{"/", "/"},
		{"/tenants/a", "/tenants/a"},
		{"/tenants/x?y=1", "/tenants/x?y=1"},
		{"/commits?page=2", "/commits?page=2"},
		{"/tenants?labelSelector=env%3Dprod", "/tenants?labelSelector=env%3Dprod"},
		{"", "/"},
		{"tenants/a", "/"},
		{"https://evil.test", "/"},
		{"//evil.test", "/"},
		{"///evil.test", "/"},
		{"/\\evil.test", "/"},
		{"\\/evil.test", "/"},
		{"/x\\y", "/"},
		{"/\t/evil.test", "/"},
		{"/\n/evil.test", "/"},
		{"/\r/evil.test", "/"},
		{"/\x00/evil.test", "/"},
		{"/\x7f/evil.test", "/"},
		{"/%09/evil.test", "/"},
		{"/%0a/evil.test", "/"},
		{"/%2F/evil.test", "/"},
		{"/%2f%2fevil.test", "/"},
		{"/%5Cevil.test", "/"},
		{"/%zz", "/"},
		{"/login?next=/x", "/"},
		{"/%6cogin", "/"},
		{"/a\r\nSet-Cookie:", "/"},
	} {
		if got := safeNext(c.next); got != c.want {
			t.Errorf("safeNext(%q) = %q, want %q", c.next, got, c.want)
		}
	}
}

// TestLoginNext: a login whose next page would be another origin, once a
// browser drops its tab, goes to the overview.
func TestLoginNext(t *testing.T) {
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}})
	for _, next := range []string{"/\t/evil.example", "/\n/evil.example", "/%09/evil.example"} {
		c, field := r.loginForm(t)
		form := url.Values{"csrf": {field}, "token": {"secret-viewer"}, "next": {next}}
		resp := r.do("POST", "/login", http.Header{"Cookie": {c.String()}}, form.Encode())
		body(t, resp, http.StatusSeeOther)
		if loc := resp.Header.Get("Location"); loc != "/" {
			t.Errorf("login with next %q sends to %q, want /", next, loc)
		}
		page := body(t, r.do("GET", "/login?next="+url.QueryEscape(next), nil, ""), http.StatusOK)
		if !strings.Contains(page, `name="next" value="/"`) {
			t.Errorf("the login page for next %q does not carry / on", next)
		}
	}
}

// TestLoginLimits: five typos are free; the sixth makes the address wait a
// second, and the login page says so, with 429 and Retry-After for a try
// within that second, even with the right token. Then it logs in.
func TestLoginLimits(t *testing.T) {
	now := testNow
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}, clock: func() time.Time { return now }})
	c, field := r.loginForm(t)
	try := func(secret string) *http.Response {
		form := url.Values{"csrf": {field}, "token": {secret}, "next": {"/tenants/production"}}
		return r.do("POST", "/login", http.Header{"Cookie": {c.String()}}, form.Encode())
	}
	for i := range 5 {
		resp := try("wrong")
		contains(t, fmt.Sprintf("typo %d", i+1), body(t, resp, http.StatusUnauthorized), "That token is not valid.")
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("typo %d: Retry-After %q", i+1, ra)
		}
	}
	resp := try("wrong")
	contains(t, "sixth typo", body(t, resp, http.StatusUnauthorized),
		"That token is not valid, and there were too many failed logins from your address: try again in 1 second.")
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("sixth typo: Retry-After %q, want 1", ra)
	}
	resp = try("secret-viewer")
	contains(t, "a login while the address waits", body(t, resp, http.StatusTooManyRequests),
		"There were too many failed logins from your address: try again in 1 second.", `role="alert"`)
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("a login while the address waits: Retry-After %q, want 1", ra)
	}
	for _, c := range resp.Cookies() {
		if c.Name == backend.SessionCookie {
			t.Error("a refused login sets a session cookie")
		}
	}
	now = now.Add(time.Second)
	body(t, r.do("GET", "/", cookieHeader(r.login(t, "secret-viewer")), ""), http.StatusOK)
}

// TestLoginSessionsPerToken: a token's 33rd login ends its oldest session;
// the oldest cookie no longer works, the newer ones do.
func TestLoginSessionsPerToken(t *testing.T) {
	now := testNow
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}, clock: func() time.Time { return now }})
	var cookies []http.Header
	for range 33 {
		now = now.Add(6 * time.Second) // the pace the login limits allow one token
		cookies = append(cookies, cookieHeader(r.login(t, "secret-viewer")))
	}
	if resp := r.do("GET", "/api/v1/tenants", cookies[0], ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the oldest of 33 sessions of one token: %d, want 401", resp.StatusCode)
	}
	for i, h := range cookies[1:] {
		if resp := r.do("GET", "/api/v1/tenants", h, ""); resp.StatusCode != http.StatusOK {
			t.Errorf("session %d of 33: %d, want 200", i+2, resp.StatusCode)
		}
	}
}

// TestLogTail: the machine page follows the machine's log only once the
// server serves it, and only for the edit role, which reading logs needs.
func TestLogTail(t *testing.T) {
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView, "editor": backend.RoleEdit}})
	const page = "/tenants/production/machines/production-workers-1"
	edit := cookieHeader(r.login(t, "secret-editor"))
	if b := body(t, r.do("GET", page, edit, ""), 200); strings.Contains(b, "data-logs") {
		t.Error("the page follows logs the server does not serve")
	}
	r.srv.Handle("GET /api/v1/tenants/{name}/machines/{id}/logs", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	contains(t, "edit session", body(t, r.do("GET", page, edit, ""), 200),
		`data-logs="/api/v1/tenants/production/machines/production-workers-1/logs?follow=true&amp;tailLines=100"`)
	view := cookieHeader(r.login(t, "secret-viewer"))
	b := body(t, r.do("GET", page, view, ""), 200)
	if strings.Contains(b, "data-logs") {
		t.Error("a view session is offered logs, which need the edit role")
	}
	contains(t, "view session", b, "Reading a machine's log needs the edit role.")
}
