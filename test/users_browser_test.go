package test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestUserLoginBrowser: in a real Chromium, the dashboard of a server
// with --users-file asks for a user name and a password, says so when
// they are wrong, logs the user in with their role, and logs them out.
func TestUserLoginBrowser(t *testing.T) {
	chromiumPath(t) // skips before the server starts when there is no Chromium
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte(userLine(t, "ana", "edit", "ana-browser-pw")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, servertest.Options{Args: []string{"--users-file", users}})
	b := newBrowser(t, srv.URL())

	b.open("/")
	if loc := eval[string](b, "location.pathname"); loc != "/login" {
		t.Fatalf("without a session the dashboard shows %s, want /login", loc)
	}
	b.do("a wrong password",
		chromedp.SendKeys(chromedp.ID("username"), "ana"),
		chromedp.SendKeys(chromedp.ID("password"), "not her password"),
		chromedp.Submit(chromedp.ID("password")))
	if !b.waitFor(`document.body.innerText.includes("That user name or password is not valid.")`, 10*time.Second) {
		t.Fatalf("after a wrong password the page says:\n%s", b.text())
	}
	b.screenshot("login-refused")
	b.do("log in",
		chromedp.SendKeys(chromedp.ID("username"), "ana"),
		chromedp.SendKeys(chromedp.ID("password"), "ana-browser-pw"),
		chromedp.Submit(chromedp.ID("password")))
	if !b.waitFor(`location.pathname === "/" && !!document.querySelector("form.who")`, 10*time.Second) {
		t.Fatalf("after login the browser is at %s:\n%s", eval[string](b, "location.href"), b.text())
	}
	if who := eval[string](b, `document.querySelector("form.who").innerText`); !strings.Contains(who, "ana") {
		t.Errorf("the page names %q, want ana", who)
	}
	who := eval[string](b, `fetch("/api/v1/auth/whoami").then(r => r.text())`)
	if !strings.Contains(who, `"user":"ana","role":"edit","source":"local","expiresAt":"`) {
		t.Errorf("whoami with the session: %s", who)
	}
	b.screenshot("logged-in-as-ana")
	session := b.cookie("rezuscloud_session")
	b.do("log out", chromedp.Click(chromedp.CSS(`form.who button`)))
	if !b.waitFor(`location.pathname === "/login"`, 10*time.Second) {
		t.Fatalf("after logout the browser is at %s", eval[string](b, "location.href"))
	}
	// The old cookie, replayed, is worthless: the server ended the session.
	if code, _ := srv.Request("GET", "/api/v1/auth/whoami", nil, http.Header{"Cookie": {"rezuscloud_session=" + session}}); code != 401 {
		t.Errorf("whoami with the logged-out session's cookie: %d, want 401", code)
	}
	b.checkRequests()
	b.checkConsoleExcept("/login")
}
