package ui

import (
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
)

// TestUserLoginForm: with local users the login page has a user name and
// password form beside the token form; a user logs in with it, gets the
// role of the users file, and logs out, each audited.
func TestUserLoginForm(t *testing.T) {
	r := filled(t, rigOptions{tokens: map[string]backend.Role{"viewer": backend.RoleView}})
	page := body(t, r.do("GET", "/login", nil, ""), 200)
	if strings.Contains(page, `name="username"`) || !strings.Contains(page, "This server asks for a token.") {
		t.Fatal("a server without users shows the users' form, or does not say it asks for a token")
	}

	hash, err := backend.HashPassword("ana's pass", backend.HashArgon2id)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users")
	os.WriteFile(path, []byte("ana edit "+hash+"\n"), 0o600)
	users, err := backend.LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	audit := &strings.Builder{}
	r.srv.SetAudit(slog.New(slog.NewTextHandler(audit, nil)))
	r.srv.ServeUsers(users)

	c, field := r.loginForm(t)
	page = body(t, r.do("GET", "/login", nil, ""), 200)
	contains(t, "login page", page, `<input id="username" name="username" type="text" autocomplete="username"`,
		`<input id="password" name="password" type="password" autocomplete="current-password" required>`, `name="token"`,
		"Sign in as yourself with your user name and password. A token works too")
	if strings.Count(page, "autofocus") != 1 {
		t.Errorf("the login page focuses %d fields, want the user name alone", strings.Count(page, "autofocus"))
	}
	h := http.Header{"Cookie": {c.String()}, "Origin": {"http://example.com"}}
	post := func(user, password string) *http.Response {
		form := url.Values{"csrf": {field}, "username": {user}, "password": {password}, "next": {"/tenants/production"}}
		return r.do("POST", "/login", h, form.Encode())
	}
	contains(t, "wrong password", body(t, post("ana", "wrong"), http.StatusUnauthorized), "That user name or password is not valid.")
	contains(t, "missing user", body(t, post("nobody", "ana's pass"), http.StatusUnauthorized), "That user name or password is not valid.")
	resp := post("ana", "ana's pass")
	body(t, resp, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); loc != "/tenants/production" {
		t.Errorf("login sends to %q", loc)
	}
	var sess *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == backend.SessionCookie {
			sess = c
		}
	}
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v", sess)
	}
	sh := cookieHeader(sess)
	page = body(t, r.do("GET", "/tenants/production", sh, ""), 200)
	contains(t, "ana's page", page, "ana", "Log out")
	if resp := r.do("GET", "/api/v1/tenants/production", sh, ""); resp.StatusCode != 200 {
		t.Errorf("API read with ana's session: %d", resp.StatusCode)
	}

	token := csrfField.FindStringSubmatch(page)[1]
	body(t, r.do("POST", "/logout", sh, url.Values{"csrf": {token}}.Encode()), http.StatusSeeOther)
	if resp := r.do("GET", "/tenants/production", sh, ""); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("page after logout: %d", resp.StatusCode)
	}
	log := audit.String()
	for _, want := range []string{
		`msg="failed login" user=ana source=local remote=127.0.0.1:5555 via=dashboard reason="invalid credentials"`,
		`msg="failed login" user=nobody source=local remote=127.0.0.1:5555 via=dashboard`,
		`msg=login who=ana source=local role=edit remote=127.0.0.1:5555 via=dashboard`,
		`msg=logout who=ana source=local remote=127.0.0.1:5555 via=dashboard`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "pass") {
		t.Errorf("the audit log holds a password:\n%s", log)
	}
}
