package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// userAdd runs `rezuscloud user add` with stdin and returns what it
// printed and its error.
func userAdd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd(func(string) string { return "" })
	out, errOut := new(bytes.Buffer), new(bytes.Buffer)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"user", "add"}, args...))
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestUserAdd(t *testing.T) {
	var lines []string
	for _, c := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"ana", "--role", "edit"}, "ana edit $argon2id$v=19$m=19456,t=2,p=1$"},
		{[]string{"bo", "--role", "admin", "--hash", "bcrypt"}, "bo admin $2a$12$"},
	} {
		out, prompts, err := userAdd(t, "pass word\npass word\n", c.args...)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSpace(out), "\n")
		if len(got) != 2 || got[0] != "# add this line to the users file:" || !strings.HasPrefix(got[1], c.prefix) {
			t.Fatalf("user add %v printed:\n%s", c.args, out)
		}
		if strings.Contains(out, "pass word") || strings.Contains(prompts, "pass word") {
			t.Fatal("the password was echoed")
		}
		if prompts != "Password for "+c.args[0]+": Again: " {
			t.Errorf("prompts %q", prompts)
		}
		lines = append(lines, got[1])
	}
	path := filepath.Join(t.TempDir(), "users")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	users, err := backend.LoadUsers(path)
	if err != nil {
		t.Fatalf("the printed lines do not load: %v", err)
	}
	for name, role := range map[string]backend.Role{"ana": backend.RoleEdit, "bo": backend.RoleAdmin} {
		if id, err := users.Verify(name, "pass word"); err != nil || id.Role != role {
			t.Errorf("%s: %+v %v", name, id, err)
		}
	}

	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"a\nb\n", []string{"ana"}, "the passwords differ; nothing was printed"},
		{"\n\n", []string{"ana"}, "the password is empty"},
		{"only once\n", []string{"ana"}, "read the password again: standard input ended"},
		{"a\na\n", []string{"ana:x"}, `user name "ana:x"`},
		{"a\na\n", []string{"ana", "--role", "root"}, `unknown role "root"`},
		{"a\na\n", []string{"ana", "--hash", "md5"}, `unknown hash "md5"`},
		{strings.Repeat("x", 80) + "\n" + strings.Repeat("x", 80) + "\n", []string{"ana", "--hash", "bcrypt"}, "first 72 bytes"},
	} {
		out, _, err := userAdd(t, c.stdin, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || out != "" {
			t.Errorf("%v with %q: %v, printed %q; want %s", c.args, c.stdin, err, out, c.want)
		}
	}
}

// TestUsersFileServe: --users-file closes the server, its users log in,
// SIGHUP's reload applies and audits a role change, and a broken file
// stops the start with its line.
func TestUsersFileServe(t *testing.T) {
	out, _, err := userAdd(t, "pw\npw\n", "ana", "--role", "edit")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Split(strings.TrimSpace(out), "\n")[1]
	path := filepath.Join(t.TempDir(), "users")
	os.WriteFile(path, []byte(line+"\n"), 0o600)
	f := testServeFlags(t, servertest.Options{Args: []string{"--users-file", path}})
	m := NewMain(f, slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Server.Tokens().Open() {
		t.Fatal("a server with users is open")
	}
	h := m.Server.Handler()
	login := func() (int, map[string]any) {
		req, _ := http.NewRequest("POST", backend.LoginPath, strings.NewReader(`{"username":"ana","password":"pw"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = "127.0.0.1:1234"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var ans map[string]any
		json.Unmarshal(rec.Body.Bytes(), &ans)
		return rec.Code, ans
	}
	if code, ans := login(); code != 200 || ans["role"] != "edit" {
		t.Fatalf("login: %d %v", code, ans)
	}
	req, _ := http.NewRequest("GET", "/api/v1/tenants", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Errorf("a request without a credential: %d", rec.Code)
	}

	os.WriteFile(path, []byte(strings.Replace(line, " edit ", " admin ", 1)+"\n"), 0o600)
	m.reloadUsers()
	if code, ans := login(); code != 200 || ans["role"] != "admin" {
		t.Fatalf("login after the reload: %d %v", code, ans)
	}
	audit, _ := os.ReadFile(filepath.Join(f.data, "audit.log"))
	for _, want := range []string{`"msg":"role change","who":"ana","source":"local","from":"edit","to":"admin"`, `"msg":"login","who":"ana","source":"local","role":"edit"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit.log lacks %s:\n%s", want, audit)
		}
	}
	m.Close()

	os.WriteFile(path, []byte("# users\nana edit pw\n"), 0o600)
	bad := NewMain(testServeFlags(t, servertest.Options{Args: []string{"--users-file", path}}), slog.New(slog.DiscardHandler))
	defer bad.Close()
	if err := bad.Open(); err == nil || !strings.Contains(err.Error(), "--users-file: "+path+":2: user ana: unknown hash") {
		t.Fatalf("Open with a broken users file: %v", err)
	}
}
