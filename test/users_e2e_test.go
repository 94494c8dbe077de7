package test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// userLine runs `rezuscloud user add` of the real binary with the
// password on standard input, as a script would, and returns the
// users-file line it prints.
func userLine(t *testing.T, name, role, password string, args ...string) string {
	t.Helper()
	cmd := exec.Command(servertest.Binary(t), append([]string{"user", "add", name, "--role", role}, args...)...)
	cmd.Stdin = strings.NewReader(password + "\n" + password + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("user add %s: %v", name, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], name+" "+role+" $") || strings.Contains(string(out), password) {
		t.Fatalf("user add %s printed:\n%s", name, out)
	}
	return lines[1]
}

// TestLocalUsersE2E: the real server with --users-file: a user logs in
// for a bearer token, whoami names them, the token reads the API, logout
// revokes it and it is refused from then on; a session login's cookie
// works for whoami; SIGHUP applies a role change and a removal; a restart
// ends the tokens of earlier logins; the audit log has it all and no
// password.
func TestLocalUsersE2E(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users")
	ana := userLine(t, "ana", "edit", "ana-e2e-pw")
	bo := userLine(t, "bo", "view", "bo-e2e-pw", "--hash", "bcrypt")
	if err := os.WriteFile(users, []byte("# team\n"+ana+"\n"+bo+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, servertest.Options{Args: []string{"--users-file", users}})
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	login := func(user, password string, session bool) (int, map[string]any, http.Header) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"username": user, "password": password, "session": session})
		req, _ := http.NewRequest("POST", srv.URL()+"/api/v1/auth/login", strings.NewReader(string(body)))
		req.Header = jsonHeader.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans map[string]any
		json.NewDecoder(resp.Body).Decode(&ans)
		return resp.StatusCode, ans, resp.Header
	}
	call := func(method, path string, h http.Header) (int, map[string]any) {
		t.Helper()
		code, b := srv.Request(method, path, nil, h)
		var ans map[string]any
		json.Unmarshal(b, &ans)
		return code, ans
	}
	auth := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	if code, _ := call("GET", "/api/v1/tenants", nil); code != 401 {
		t.Fatalf("a server with users answers %d without a credential", code)
	}
	if code, ans, _ := login("ana", "wrong", false); code != 401 || ans["message"] != "invalid user name or password" {
		t.Fatalf("a wrong password: %d %v", code, ans)
	}
	code, ans, _ := login("ana", "ana-e2e-pw", false)
	tok, _ := ans["token"].(string)
	if code != 200 || tok == "" || ans["user"] != "ana" || ans["role"] != "edit" || ans["source"] != "local" || ans["expiresAt"] == nil {
		t.Fatalf("login: %d %v", code, ans)
	}
	if code, who := call("GET", "/api/v1/auth/whoami", auth(tok)); code != 200 || who["user"] != "ana" || who["role"] != "edit" || who["source"] != "local" || who["expiresAt"] != ans["expiresAt"] {
		t.Fatalf("whoami: %d %v", code, who)
	}
	if code, _ := call("GET", "/api/v1/tenants", auth(tok)); code != 200 {
		t.Fatalf("tenants with the login's token: %d", code)
	}
	if code, _ := call("POST", "/api/v1/auth/logout", auth(tok)); code != http.StatusNoContent {
		t.Fatalf("logout: %d", code)
	}
	if code, who := call("GET", "/api/v1/auth/whoami", auth(tok)); code != 401 || !strings.Contains(who["message"].(string), "revoked by a logout") {
		t.Fatalf("whoami after logout: %d %v", code, who)
	}
	if code, _ := call("GET", "/api/v1/tenants", auth(tok)); code != 401 {
		t.Fatalf("tenants after logout: %d", code)
	}

	// A session login sets the dashboard's cookie, which whoami takes.
	code, ans, h := login("bo", "bo-e2e-pw", true)
	cookie := h.Get("Set-Cookie")
	if code != 200 || ans["token"] != nil || !strings.Contains(cookie, "rezuscloud_session=") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("session login: %d %v %q", code, ans, cookie)
	}
	session := http.Header{"Cookie": {strings.Split(cookie, ";")[0]}}
	if code, who := call("GET", "/api/v1/auth/whoami", session); code != 200 || who["user"] != "bo" || who["role"] != "view" {
		t.Fatalf("whoami with the session: %d %v", code, who)
	}

	// SIGHUP: bo becomes an admin, ana leaves.
	_, ans, _ = login("ana", "ana-e2e-pw", false)
	anaTok := ans["token"].(string)
	if err := os.WriteFile(users, []byte(strings.Replace(bo, " view ", " admin ", 1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Signal(syscall.SIGHUP)
	srv.WaitFor("bo's new role", func() bool {
		_, who := call("GET", "/api/v1/auth/whoami", session)
		return who["role"] == "admin"
	})
	if code, who := call("GET", "/api/v1/auth/whoami", auth(anaTok)); code != 401 || !strings.Contains(who["message"].(string), "left the users file") {
		t.Fatalf("ana's token after her removal: %d %v", code, who)
	}

	// A restart ends the tokens of earlier logins.
	_, ans, _ = login("bo", "bo-e2e-pw", false)
	boTok := ans["token"].(string)
	srv.Stop()
	srv.Start()
	if code, who := call("GET", "/api/v1/auth/whoami", auth(boTok)); code != 401 || !strings.Contains(who["message"].(string), "restarted since the login") {
		t.Fatalf("a token from before the restart: %d %v", code, who)
	}

	audit, err := os.ReadFile(filepath.Join(srv.Data(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"msg":"failed login","user":"ana","source":"local","remote":"127.0.0.1:`,
		`"msg":"login","who":"ana","source":"local","role":"edit"`,
		`"msg":"logout","who":"ana","source":"local"`,
		`"msg":"login","who":"bo","source":"local","role":"view","remote":"127.0.0.1:`,
		`"msg":"role change","who":"bo","source":"local","from":"view","to":"admin"`,
		`"msg":"user removed","who":"ana","source":"local","role":"edit"`,
	} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit.log lacks %s:\n%s", want, audit)
		}
	}
	if strings.Contains(string(audit), "e2e-pw") || strings.Contains(string(audit), "rzl_") {
		t.Errorf("audit.log holds a password or a token:\n%s", audit)
	}
}
