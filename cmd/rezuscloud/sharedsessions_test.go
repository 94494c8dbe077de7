package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestReplicasShareDashboardSessions: a dashboard session that one
// replica made, with a local user's password or with a token of the
// tokens file, is accepted by another replica, with the same role and
// the same synchronizer token, also after the replica that made it
// stopped; a logout through either replica ends it on both; a cookie
// that names no session is refused.
func TestReplicasShareDashboardSessions(t *testing.T) {
	c := etcdtest.Start(t, 1)
	users := anaUsersFile(t)
	file, secrets := servertest.Tokens(t, map[string]string{"ops": "admin"})
	type replica struct {
		m   *Main
		url string
	}
	open := func(name string) replica {
		m := openReplicaMain(t, c, name, "--users-file", users, "--tokens-file", file)
		s := httptest.NewServer(m.Server.Handler())
		t.Cleanup(s.Close)
		return replica{m, s.URL}
	}
	call := func(r replica, method, path, cookie string, body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, r.url+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: backend.SessionCookie, Value: cookie})
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if method == "POST" && path == backend.LoginPath {
			for _, c := range resp.Cookies() {
				if c.Name == backend.SessionCookie {
					return resp.StatusCode, c.Value
				}
			}
		}
		return resp.StatusCode, string(b)
	}
	whoami := func(r replica, cookie, user, role string) {
		t.Helper()
		code, body := call(r, "GET", backend.WhoamiPath, cookie, nil)
		if code != http.StatusOK || !strings.Contains(body, `"user":"`+user+`"`) || !strings.Contains(body, `"role":"`+role+`"`) {
			t.Fatalf("whoami with the session on %s: %d %s, want %s as %s", r.url, code, body, user, role)
		}
	}
	refused := func(r replica, cookie, why string) {
		t.Helper()
		if code, body := call(r, "GET", backend.WhoamiPath, cookie, nil); code != http.StatusUnauthorized {
			t.Errorf("%s: whoami on %s: %d %s, want 401", why, r.url, code, body)
		}
	}
	a, b := open("a"), open("b")

	// A local user's session, made by a, is b's too, with its CSRF token.
	code, ana := call(a, "POST", backend.LoginPath, "", strings.NewReader(`{"username":"ana","password":"ana's pass","session":true}`))
	if code != http.StatusOK || ana == "" {
		t.Fatalf("session login on a: %d %q", code, ana)
	}
	whoami(a, ana, "ana", "edit")
	whoami(b, ana, "ana", "edit")
	onA, okA := a.m.Server.Sessions().Check(ana)
	onB, okB := b.m.Server.Sessions().Check(ana)
	if !okA || !okB || onA.CSRF == "" || onA.CSRF != onB.CSRF || !onA.Expires.Equal(onB.Expires) {
		t.Fatalf("the session on a (%v) and on b (%v): want one session, with one CSRF token and one expiry", okA, okB)
	}
	forged := []byte(ana)
	forged[3] ^= 1 // another session id, with a's signature no longer its own
	refused(b, string(forged), "a cookie that names no session")
	refused(a, string(forged), "a cookie that names no session")

	// A token's session, made by a: b accepts it, and a logout through b
	// ends it on a.
	tok, _, err := a.m.Server.Sessions().Login("127.0.0.1:1", secrets["ops"])
	if err != nil {
		t.Fatal(err)
	}
	whoami(b, tok, "ops", "admin")
	if code, body := call(b, "POST", backend.LogoutPath, tok, nil); code != http.StatusNoContent {
		t.Fatalf("logout on b: %d %s", code, body)
	}
	refused(a, tok, "after a logout through the other replica")
	refused(b, tok, "after a logout through this replica")

	// a stops: its sessions go on, on b and on a replica that takes its
	// place with a new signing key.
	a.m.Close()
	whoami(b, ana, "ana", "edit")
	a2 := open("a")
	whoami(a2, ana, "ana", "edit")
	if code, body := call(a2, "POST", backend.LogoutPath, ana, nil); code != http.StatusNoContent {
		t.Fatalf("logout on the new a: %d %s", code, body)
	}
	refused(b, ana, "after a logout through the replica that took the maker's place")
	refused(a2, ana, "after a logout through this replica")
}
