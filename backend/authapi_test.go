package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is a clock that tests move.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// authRig is a server with the test tokens and the local users ana (edit)
// and bo (view), on a clock of its own, with its audit log in a buffer.
type authRig struct {
	*testServer
	clock *testClock
	users string // the users file
	audit *syncBuffer
}

func newAuthRig(t *testing.T) *authRig {
	t.Helper()
	clock := &testClock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
	rig := &authRig{clock: clock, audit: &syncBuffer{}}
	rig.testServer = startServer(t, Config{SessionClock: clock.Now}, true)
	rig.users = writeUsers(t, "", "ana edit "+cheapArgon2id("ana-pw")+"\nbo view "+cheapBcrypt(t, "bo-pw")+"\n")
	users, err := LoadUsers(rig.users)
	if err != nil {
		t.Fatal(err)
	}
	rig.SetAudit(slog.New(slog.NewTextHandler(rig.audit, nil)))
	rig.ServeUsers(users)
	return rig
}

// login posts a login and returns the status, the decoded answer (or
// error), the response's headers and its session cookie.
func (r *authRig) login(t *testing.T, from, body string) (int, map[string]any, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", r.URL()+LoginPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := http.DefaultClient
	if from != "" {
		client = clientFrom(t, from)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil && resp.StatusCode != http.StatusNoContent {
		t.Fatal(err)
	}
	cookie := ""
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			cookie = c.Value
		}
	}
	return resp.StatusCode, ans, resp.Header, cookie
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so that the server sees another client address.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &netDialer{local: ip}
	return &http.Client{Transport: &http.Transport{DialContext: d.dial}}
}

func loginBody(user, password string, session bool) string {
	b, _ := json.Marshal(map[string]any{"username": user, "password": password, "session": session})
	return string(b)
}

// whoami asks whoami with the header h and returns the status and answer.
func (r *authRig) whoami(t *testing.T, h map[string]string) (int, map[string]any) {
	t.Helper()
	code, body := r.do(t, req{method: "GET", path: WhoamiPath, header: h})
	var ans map[string]any
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatalf("whoami: %s", body)
	}
	return code, ans
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
func cookie(v string) map[string]string   { return map[string]string{"Cookie": SessionCookie + "=" + v} }

func TestLocalLoginBearer(t *testing.T) {
	r := newAuthRig(t)
	code, ans, _, c := r.login(t, "", loginBody("ana", "ana-pw", false))
	tok, _ := ans["token"].(string)
	if code != 200 || !strings.HasPrefix(tok, loginTokenPrefix) || c != "" || ans["user"] != "ana" || ans["role"] != "edit" || ans["source"] != "local" || ans["expiresAt"] != "2026-12-06T12:00:00Z" {
		t.Fatalf("login: %d %v cookie %q", code, ans, c)
	}
	code, who := r.whoami(t, bearer(tok))
	if code != 200 || fmt.Sprint(who) != "map[expiresAt:2026-12-06T12:00:00Z role:edit source:local user:ana]" {
		t.Fatalf("whoami: %d %v", code, who)
	}
	// The token reads the API and writes state, as ana's role allows.
	if code, body := r.do(t, req{method: "GET", path: "/api/v1/tenants", bearer: tok}); code != 200 {
		t.Fatalf("tenants: %d %s", code, body)
	}
	if code, body := r.do(t, req{method: "POST", path: StatePrefix + "t1", bearer: tok, body: []byte(`{"version":4,"serial":1,"lineage":"l1"}`)}); code != 200 {
		t.Fatalf("state write as edit: %d %s", code, body)
	}

	// A role change in the file applies at once; leaving it ends the token.
	hash := r.Users().byName["ana"].hash
	writeUsers(t, r.users, "ana view "+hash+"\nbo view "+r.Users().byName["bo"].hash+"\n")
	if _, err := r.Users().Reload(); err != nil {
		t.Fatal(err)
	}
	if _, who := r.whoami(t, bearer(tok)); who["role"] != "view" {
		t.Errorf("after the role change: %v", who)
	}

	// Logout revokes the token.
	if code, body := r.do(t, req{method: "POST", path: LogoutPath, bearer: tok}); code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", code, body)
	}
	code, who = r.whoami(t, bearer(tok))
	if code != 401 || !strings.Contains(who["message"].(string), "unknown login token: it was revoked by a logout") {
		t.Errorf("whoami after logout: %d %v", code, who)
	}
	if code, body := r.do(t, req{method: "POST", path: LogoutPath, bearer: tok}); code != 401 {
		t.Errorf("second logout: %d %s", code, body)
	}

	// Expiry, on the sessions' clock.
	_, ans, _, _ = r.login(t, "", loginBody("ana", "ana-pw", false))
	tok = ans["token"].(string)
	r.clock.Add(12*time.Hour - time.Second)
	if code, _ := r.whoami(t, bearer(tok)); code != 200 {
		t.Fatalf("a second before expiry: %d", code)
	}
	r.clock.Add(time.Second)
	code, who = r.whoami(t, bearer(tok))
	if code != 401 || !strings.Contains(who["message"].(string), "login token of ana expired at 2026-12-06T12:00:00Z; log in again") {
		t.Errorf("after expiry: %d %v", code, who)
	}

	// Removal from the file ends a live token.
	_, ans, _, _ = r.login(t, "", loginBody("bo", "bo-pw", false))
	tok = ans["token"].(string)
	writeUsers(t, r.users, "ana view "+hash+"\n")
	if _, err := r.Users().Reload(); err != nil {
		t.Fatal(err)
	}
	code, who = r.whoami(t, bearer(tok))
	if code != 401 || !strings.Contains(who["message"].(string), "the user left the users file or their password changed") {
		t.Errorf("after removal: %d %v", code, who)
	}

	audit := r.audit.String()
	for _, want := range []string{
		`msg=login who=ana source=local role=edit remote=127.0.0.1:`,
		`msg=logout who=ana source=local remote=127.0.0.1:`,
		`msg="expired credential" who=ana source=local expiredAt=2026-12-06T12:00:00Z`,
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit log lacks %q:\n%s", want, audit)
		}
	}
	if strings.Contains(audit, "ana-pw") || strings.Contains(audit, loginTokenPrefix) {
		t.Errorf("the audit log holds a password or a token:\n%s", audit)
	}
}

func TestLocalLoginSession(t *testing.T) {
	r := newAuthRig(t)
	code, ans, _, c := r.login(t, "", loginBody("bo", "bo-pw", true))
	if code != 200 || c == "" || ans["token"] != nil || ans["user"] != "bo" || ans["role"] != "view" || ans["expiresAt"] != "2026-12-06T12:00:00Z" {
		t.Fatalf("session login: %d %v cookie %q", code, ans, c)
	}
	if code, who := r.whoami(t, cookie(c)); code != 200 || fmt.Sprint(who) != "map[expiresAt:2026-12-06T12:00:00Z role:view source:local user:bo]" {
		t.Fatalf("whoami: %d %v", code, who)
	}
	// The session reads the API, as the dashboard does, and never writes.
	if code, _ := r.do(t, req{method: "GET", path: "/api/v1/tenants", header: cookie(c)}); code != 200 {
		t.Errorf("tenants with the session: %d", code)
	}
	if code, _ := r.do(t, req{method: "POST", path: StatePrefix + "t1", header: cookie(c), body: []byte(`{}`)}); code != 401 {
		t.Errorf("a state write with the session: %d", code)
	}
	// A new password in the file ends the session.
	writeUsers(t, r.users, "ana edit "+r.Users().byName["ana"].hash+"\nbo view "+cheapArgon2id("new")+"\n")
	if _, err := r.Users().Reload(); err != nil {
		t.Fatal(err)
	}
	if code, _ := r.whoami(t, cookie(c)); code != 401 {
		t.Errorf("the session outlives a new password: %d", code)
	}

	// Logout ends it on the server.
	_, _, _, c = r.login(t, "", loginBody("bo", "new", true))
	if code, _ := r.do(t, req{method: "POST", path: LogoutPath, header: map[string]string{"Cookie": SessionCookie + "=" + c, "Origin": "http://evil.example"}}); code != 403 {
		t.Errorf("a logout from another site: %d", code)
	}
	resp := r.doResp(t, req{method: "POST", path: LogoutPath, header: cookie(c)})
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("logout: %d %v", resp.StatusCode, resp.Header)
	}
	if code, _ := r.whoami(t, cookie(c)); code != 401 {
		t.Errorf("the session outlives its logout: %d", code)
	}
	if !strings.Contains(r.audit.String(), `msg=logout who=bo source=local remote=127.0.0.1:`) {
		t.Errorf("no logout in the audit log:\n%s", r.audit)
	}
}

// TestWhoamiSources: whoami names the caller whichever way they came in.
func TestWhoamiSources(t *testing.T) {
	r := newAuthRig(t)
	exp := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	r.Tokens().AddCheck(func(name, secret string) (Identity, error) {
		if secret != "oidc-id-token" {
			return Identity{}, ErrNotMine
		}
		return Identity{Name: "dee@example.com", Role: RoleEdit, Source: SourceOIDC, Subject: "sub-1", Email: "dee@example.com", Expires: exp}, nil
	})
	tokenSession, _, err := r.Sessions().Login(testClient, r.tokens["viewer"])
	if err != nil {
		t.Fatal(err)
	}
	oidcSession, _ := r.Sessions().Start(Identity{Name: "dee@example.com", Role: RoleView, Source: SourceOIDC, Subject: "sub-1", Email: "dee@example.com", Expires: exp}, nil, Elsewhere{})
	_, ans, _, _ := r.login(t, "", loginBody("ana", "ana-pw", false))
	_, _, _, localSession := r.login(t, "", loginBody("ana", "ana-pw", true))
	for _, c := range []struct {
		name   string
		header map[string]string
		token  string
		want   string
	}{
		{"token (basic)", nil, "admin", "map[role:admin source:token user:admin]"},
		{"token (bearer)", bearer(r.tokens["editor"]), "", "map[role:edit source:token user:editor]"},
		{"token session", cookie(tokenSession), "", "map[expiresAt:2026-12-06T12:00:00Z role:view source:token user:viewer]"},
		{"local bearer", bearer(ans["token"].(string)), "", "map[expiresAt:2026-12-06T12:00:00Z role:edit source:local user:ana]"},
		{"local session", cookie(localSession), "", "map[expiresAt:2026-12-06T12:00:00Z role:edit source:local user:ana]"},
		{"oidc bearer", bearer("oidc-id-token"), "", "map[email:dee@example.com expiresAt:2026-12-06T01:00:00Z role:edit source:oidc subject:sub-1 user:dee@example.com]"},
		{"oidc session", cookie(oidcSession), "", "map[email:dee@example.com expiresAt:2026-12-06T01:00:00Z role:view source:oidc subject:sub-1 user:dee@example.com]"},
	} {
		code, body := r.do(t, req{method: "GET", path: WhoamiPath, header: c.header, token: c.token})
		var who map[string]any
		json.Unmarshal(body, &who)
		if code != 200 || fmt.Sprint(who) != c.want {
			t.Errorf("%s: %d %s, want %s", c.name, code, body, c.want)
		}
	}
	if code, _ := r.do(t, req{method: "GET", path: WhoamiPath}); code != 401 {
		t.Errorf("whoami without a credential: %d", code)
	}
	// A token of the file does not log out.
	if code, body := r.do(t, req{method: "POST", path: LogoutPath, bearer: r.tokens["editor"]}); code != 400 || !strings.Contains(string(body), "ends when its line leaves the file") {
		t.Errorf("logout with a file token: %d %s", code, body)
	}

	open := startServer(t, Config{}, false)
	code, body := open.do(t, req{method: "GET", path: WhoamiPath})
	if code != 200 || !strings.Contains(string(body), `{"user":"anonymous","role":"admin","source":"none"}`) {
		t.Errorf("whoami on an open server: %d %s", code, body)
	}
	if code, body := open.do(t, req{method: "POST", path: LoginPath, body: []byte(loginBody("ana", "x", false)), header: map[string]string{"Content-Type": "application/json"}}); code != 404 || !strings.Contains(string(body), "no local users") {
		t.Errorf("login on a server without users: %d %s", code, body)
	}
}

// TestLoginRateLimit: failed logins back off per client address and per
// user, on the sessions' clock, with Retry-After and a clear message.
func TestLoginRateLimit(t *testing.T) {
	r := newAuthRig(t)
	for i := 1; i <= freeFailures; i++ {
		code, ans, h, _ := r.login(t, "", loginBody("ana", "wrong", false))
		if code != 401 || ans["message"] != "invalid user name or password" || h.Get("Retry-After") != "" {
			t.Fatalf("failure %d: %d %v %v", i, code, ans, h)
		}
	}
	code, ans, h, _ := r.login(t, "", loginBody("ana", "wrong", false))
	if code != 401 || h.Get("Retry-After") != "1" || !strings.Contains(ans["message"].(string), "too many failed logins as this user: try again in 1 second") {
		t.Fatalf("failure past the free ones: %d %v %v", code, ans, h)
	}
	// Even the right password waits now, from any address.
	code, ans, h, _ = r.login(t, "127.0.0.2", loginBody("ana", "ana-pw", false))
	if code != 429 || h.Get("Retry-After") != "1" || !strings.Contains(ans["message"].(string), "too many failed logins as this user") {
		t.Fatalf("during the backoff: %d %v %v", code, ans, h)
	}
	// Another user from another address is not held up.
	if code, ans, _, _ := r.login(t, "127.0.0.3", loginBody("bo", "bo-pw", false)); code != 200 {
		t.Fatalf("bo from elsewhere: %d %v", code, ans)
	}
	// The backoff doubles.
	r.clock.Add(time.Second)
	code, ans, h, _ = r.login(t, "127.0.0.4", loginBody("ana", "wrong", false))
	if code != 401 || h.Get("Retry-After") != "2" {
		t.Fatalf("next failure: %d %v %v", code, ans, h)
	}
	r.clock.Add(2 * time.Second)
	// A missing user is limited as a user too, and counts for the
	// address.
	for range freeFailures {
		r.login(t, "127.0.0.5", loginBody("nobody", "x", false))
	}
	code, ans, h, _ = r.login(t, "127.0.0.5", loginBody("nobody", "x", false))
	if code != 401 || h.Get("Retry-After") != "1" {
		t.Fatalf("a missing user past the free failures: %d %v %v", code, ans, h)
	}
	code, ans, h, _ = r.login(t, "127.0.0.5", loginBody("bo", "bo-pw", false))
	if code != 429 || !strings.Contains(ans["message"].(string), "too many failed logins from your address") {
		t.Fatalf("that address, another user: %d %v %v", code, ans, h)
	}
	// After the wait, the right password goes through and clears the
	// user's count.
	code, ans, _, _ = r.login(t, "127.0.0.2", loginBody("ana", "ana-pw", false))
	if code != 200 {
		t.Fatalf("after the backoff: %d %v", code, ans)
	}
	if code, _, h, _ := r.login(t, "127.0.0.6", loginBody("ana", "wrong", false)); code != 401 || h.Get("Retry-After") != "" {
		t.Errorf("a failure after a success: %d %v", code, h)
	}
	audit := r.audit.String()
	if !strings.Contains(audit, `msg="failed login" user=ana source=local remote=127.0.0.1:`) ||
		!strings.Contains(audit, `reason="too many failed logins as this user: try again in 1 second"`) ||
		!strings.Contains(audit, `msg="failed login" user=nobody source=local remote=127.0.0.5:`) {
		t.Errorf("audit log:\n%s", audit)
	}
	if strings.Contains(audit, "wrong") || strings.Contains(audit, "ana-pw") {
		t.Errorf("the audit log holds a password:\n%s", audit)
	}
}

func TestLoginRequests(t *testing.T) {
	r := newAuthRig(t)
	for _, c := range []struct {
		ctype, body string
		code        int
		want        string
	}{
		{"application/x-www-form-urlencoded", "username=ana&password=ana-pw", 415, "Content-Type: application/json"},
		{"application/json", `{"username":"ana"}`, 400, "username and password are required"},
		{"application/json", `{"username":"ana","password":"x","admin":true}`, 400, `unknown field \"admin\"`},
		{"application/json", `{"username":"ana","password":"` + strings.Repeat("x", maxLoginBody) + `"}`, 400, "request body too large"},
		{"application/json; charset=utf-8", loginBody("ana", "ana-pw", false), 200, `"user":"ana"`},
	} {
		code, body := r.do(t, req{method: "POST", path: LoginPath, body: []byte(c.body), header: map[string]string{"Content-Type": c.ctype}})
		if code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("%s %.40s: %d %s", c.ctype, c.body, code, body)
		}
	}
	if code, _ := r.do(t, req{method: "GET", path: LoginPath}); code != 405 {
		t.Errorf("GET login: %d", code)
	}
}

// netDialer dials from the loopback address local.
type netDialer struct{ local string }

func (d *netDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(d.local)}}
	return nd.DialContext(ctx, network, addr)
}
