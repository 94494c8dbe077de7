package test

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestUIBrowserSSO signs in to the dashboard in Chromium through a real
// OpenID provider: a person of group platform comes back with the edit
// role, logs out through the provider's end-session endpoint, and a
// person in no mapped group is refused with a page that says why.
func TestUIBrowserSSO(t *testing.T) {
	chromiumPath(t)
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{
		{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"platform"}},
		{Username: "bob", Password: "pw-bob", Email: "bob@example.org", Groups: []string{"sales"}},
	}})
	secret := filepath.Join(t.TempDir(), "oidc-secret")
	if err := os.WriteFile(secret, []byte(p.WebClientSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, servertest.Options{Args: []string{"--oidc-issuer", p.Issuer, "--oidc-client-id", p.WebClientID,
		"--oidc-client-secret-file", secret, "--oidc-role-map", "platform-admins=admin,platform=edit"}})
	p.AddRedirectURI(s.URL() + "/login/sso/callback")
	if strings.Contains(s.Log(), p.WebClientSecret) {
		t.Fatal("the server's log holds the client secret")
	}
	b := newBrowser(t, s.URL())

	b.open("/")
	if loc := eval[string](b, "location.pathname"); loc != "/login" {
		t.Fatalf("without a session the dashboard shows %s, want /login", loc)
	}
	signIn := func(user, password string) {
		t.Helper()
		b.do("choose single sign-on", chromedp.Click(chromedp.CSS(`a.sso`)))
		if !b.waitFor(`location.href.startsWith(`+jsString(p.Issuer+"/login/username")+`) && !!document.getElementById("password")`, 10*time.Second) {
			t.Fatalf("single sign-on went to %s, not the provider's login form", eval[string](b, "location.href"))
		}
		b.do("log in at the provider", chromedp.SendKeys(chromedp.ID("username"), user),
			chromedp.SendKeys(chromedp.ID("password"), password), chromedp.Submit(chromedp.ID("password")))
	}
	signIn("alice", "pw-alice")
	if !b.waitFor(`location.href === `+jsString(s.URL()+"/")+` && !!document.querySelector("h1")`, 15*time.Second) {
		t.Fatalf("after the sign-in the browser is at %s: %s", eval[string](b, "location.href"), b.text())
	}
	if text := b.text(); !strings.Contains(text, "alice@example.org") || !strings.Contains(text, "edit") {
		t.Fatalf("the page does not show alice with the edit role:\n%s", text)
	}
	if who := eval[string](b, `document.querySelector("form.who small").textContent`); who != "edit" {
		t.Errorf("the role shown is %q, want edit", who)
	}
	if code := eval[int](b, `fetch("/api/v1/tenants").then(r => r.status)`); code != http.StatusOK {
		t.Errorf("the API with the session cookie: %d", code)
	}
	b.screenshot("sso-as-editor")
	session := b.cookie("rezuscloud_session")

	// Logout ends the session here and at the provider, and comes back.
	b.do("log out", chromedp.Click(chromedp.CSS(`form.who button`)))
	if !b.waitFor(`location.href.startsWith(`+jsString(s.URL()+"/login")+`)`, 15*time.Second) {
		t.Fatalf("after logout the browser is at %s", eval[string](b, "location.href"))
	}
	if code, _ := s.Request(http.MethodGet, "/api/v1/tenants", nil, http.Header{"Cookie": {"rezuscloud_session=" + session}}); code != http.StatusUnauthorized {
		t.Errorf("the logged-out session's cookie: %d, want 401", code)
	}

	signIn("bob", "pw-bob")
	if !b.waitFor(`location.pathname === "/login/sso/callback" && document.body.innerText.includes("none of your groups")`, 15*time.Second) {
		t.Fatalf("bob's sign-in ended at %s: %s", eval[string](b, "location.href"), b.text())
	}
	text := b.text()
	for _, want := range []string{"403", "bob@example.org", "none of your groups (sales) is given a role", "--oidc-role-map"} {
		if !strings.Contains(text, want) {
			t.Errorf("the refusal lacks %q:\n%s", want, text)
		}
	}
	if b.cookie("rezuscloud_session") != "" {
		t.Error("bob got a session")
	}
	b.screenshot("sso-no-role")

	audit, err := os.ReadFile(filepath.Join(s.Data(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"login","who":"alice@example.org","source":"oidc","subject":"alice"`, `"msg":"logout","who":"alice@example.org"`,
		`"msg":"login refused","who":"bob@example.org"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("the audit log lacks %s:\n%s", want, audit)
		}
	}
}

// jsString quotes s as a JavaScript string.
func jsString(s string) string { return strconv.Quote(s) }
