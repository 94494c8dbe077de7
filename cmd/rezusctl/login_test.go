package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// runCLIIn runs rezusctl with stdin as its standard input.
func runCLIIn(t *testing.T, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetIn(stdin)
	root.SetArgs(args)
	code = exitCode(root.ExecuteContext(context.Background()), &errb)
	return code, out.String(), errb.String()
}

// usersServer runs a real server whose only way in is the local users
// alice (edit) and bob (view), with clock as the clock of its logins
// (nil: the real one). It returns the server and its users file.
func usersServer(t *testing.T, clock func() time.Time) *backend.Server {
	t.Helper()
	var lines []string
	for _, u := range []struct {
		name, password string
		role           backend.Role
	}{{"alice", "alice-password", backend.RoleEdit}, {"bob", "bob-password", backend.RoleView}} {
		hash, err := backend.HashPassword(u.password, backend.HashArgon2id)
		if err != nil {
			t.Fatal(err)
		}
		line, err := backend.UserLine(u.name, u.role, hash)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	file := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := backend.LoadUsers(file)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.StartBackend(t, backend.Config{SessionClock: clock}, func(s *backend.Server) error {
		s.ServeUsers(users)
		return nil
	})
}

// readLogins reads the config file's logins and checks its mode.
func readLogins(t *testing.T, path string) []savedLogin {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %04o, want 0600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg cliConfig
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return cfg.Logins
}

// A local user logs in with a password from standard input; the login
// token is stored for the server (0600), later commands send it, whoami
// names the user, and logout ends it on the server and forgets it.
func TestLoginLocalUser(t *testing.T) {
	home := isolate(t)
	srv := usersServer(t, nil)
	cfgFile := filepath.Join(home, "rezuscloud", "config.yaml")

	code, _, errOut := runCLI(t, "get", "tenants", "--server", srv.URL())
	if code != exitUsage || !strings.Contains(errOut, "401") {
		t.Fatalf("get tenants before login: code %d stderr %q, want a refusal", code, errOut)
	}

	before := time.Now()
	code, out, errOut := runCLIIn(t, strings.NewReader("alice-password\n"), "login", "--server", srv.URL()+"/", "--username", "alice")
	if code != 0 || !strings.HasPrefix(out, "Logged in to "+srv.URL()+" as alice (local, role edit), until ") {
		t.Fatalf("login: code %d stdout %q stderr %q", code, out, errOut)
	}
	if strings.Contains(out+errOut, "alice-password") {
		t.Errorf("login printed the password: %q %q", out, errOut)
	}
	logins := readLogins(t, cfgFile)
	if len(logins) != 1 {
		t.Fatalf("logins = %+v, want one", logins)
	}
	l := logins[0]
	if l.Server != srv.URL() || l.Source != client.LoginLocal || l.User != "alice" || !strings.HasPrefix(l.Token, "rzl_") || l.RefreshToken != "" {
		t.Errorf("stored login = %+v, want alice's local login token for %s", l, srv.URL())
	}
	if ttl := l.Expiry.Sub(before); ttl < backend.DefaultSessionTTL-time.Minute || ttl > backend.DefaultSessionTTL+time.Minute {
		t.Errorf("stored expiry %s is %s after the login, want about %s", l.Expiry, ttl, backend.DefaultSessionTTL)
	}

	code, out, errOut = runCLI(t, "whoami", "--server", srv.URL())
	if code != 0 {
		t.Fatalf("whoami: code %d stderr %q", code, errOut)
	}
	wantExp := l.Expiry.UTC().Format(time.RFC3339)
	for _, want := range []string{"User:      alice\n", "Role:      edit\n", "Source:    local\n", "Expires:   " + wantExp + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("whoami prints\n%s\nwant a line %q", out, want)
		}
	}
	if code, out, errOut = runCLI(t, "get", "tenants", "--server", srv.URL()); code != 0 || out != "" || !strings.HasPrefix(errOut, "No resources found") {
		t.Errorf("get tenants after login: code %d stdout %q stderr %q", code, out, errOut)
	}

	code, out, errOut = runCLI(t, "logout", "--server", srv.URL())
	if code != 0 || out != "Logged out of "+srv.URL()+" (alice).\n" || errOut != "" {
		t.Fatalf("logout: code %d stdout %q stderr %q", code, out, errOut)
	}
	if got := readLogins(t, cfgFile); len(got) != 0 {
		t.Errorf("logins after logout = %+v, want none", got)
	}
	// The server ended the token too.
	c, err := client.New(client.Options{Server: srv.URL(), Token: l.Token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Whoami(context.Background()); client.Code(err) != 401 || !strings.Contains(err.Error(), "unknown login token") {
		t.Errorf("the token after logout: %v, want 401 unknown login token", err)
	}
	if code, _, errOut = runCLI(t, "logout", "--server", srv.URL()); code != exitFailed || !strings.Contains(errOut, "no login of "+srv.URL()+" is stored in "+cfgFile) {
		t.Errorf("second logout: code %d stderr %q", code, errOut)
	}
}

// A wrong password is refused with the server's message and stores
// nothing; a server without local users says so.
func TestLoginLocalRefused(t *testing.T) {
	home := isolate(t)
	srv := usersServer(t, nil)
	code, out, errOut := runCLIIn(t, strings.NewReader("wrong\n"), "login", "--server", srv.URL(), "--username", "alice")
	if code != exitUsage || out != "" || errOut != "error: login refused: invalid user name or password\n" {
		t.Errorf("wrong password: code %d stdout %q stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(home, "rezuscloud", "config.yaml")); !os.IsNotExist(err) {
		t.Errorf("a refused login wrote the config file: %v", err)
	}
	code, _, errOut = runCLIIn(t, strings.NewReader("\n"), "login", "--server", srv.URL(), "--username", "alice")
	if code != exitUsage || errOut != "error: the password is empty\n" {
		t.Errorf("empty password: code %d stderr %q", code, errOut)
	}

	plain := servertest.StartBackend(t, backend.Config{}, nil)
	code, _, errOut = runCLIIn(t, strings.NewReader("pw\n"), "login", "--server", plain.URL(), "--username", "alice")
	if code != exitUsage || !strings.Contains(errOut, "login refused: this server has no local users") {
		t.Errorf("server without users: code %d stderr %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "login", "--server", plain.URL())
	if code != exitUsage || !strings.Contains(errOut, "the server has no single sign-on") || !strings.Contains(errOut, "--username") {
		t.Errorf("server without single sign-on: code %d stderr %q", code, errOut)
	}
}

// A local login that has expired is not sent: the command says whose
// login ended when, and how to log in again.
func TestLoginLocalExpired(t *testing.T) {
	home := isolate(t)
	// The server's clock is 13 hours behind, so its 12-hour login ended
	// an hour ago.
	srv := usersServer(t, func() time.Time { return time.Now().Add(-13 * time.Hour) })
	code, _, errOut := runCLIIn(t, strings.NewReader("bob-password\n"), "login", "--server", srv.URL(), "--username", "bob")
	if code != 0 {
		t.Fatalf("login: code %d stderr %q", code, errOut)
	}
	l := readLogins(t, filepath.Join(home, "rezuscloud", "config.yaml"))[0]
	code, out, errOut := runCLI(t, "whoami", "--server", srv.URL())
	want := "error: the login of bob expired at " + l.Expiry.UTC().Format(time.RFC3339) + "; log in again with rezusctl login --username bob\n"
	if code != exitUsage || out != "" || errOut != want {
		t.Errorf("whoami with an expired login: code %d stdout %q stderr %q, want %q", code, out, errOut, want)
	}
}

// A config file with logins that others may read is made 0600 when it is
// read, with a warning; config view never shows the tokens.
func TestLoginConfigFileTightened(t *testing.T) {
	home := isolate(t)
	dir := filepath.Join(home, "rezuscloud")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	const content = `logins:
  - server: http://127.0.0.1:1
    source: oidc
    user: carol@example.com
    token: secret-id-token
    refresh-token: secret-refresh-token
    expiry: "2026-12-06T00:00:00Z"
    issuer: http://127.0.0.1:2
    client-id: rezusctl
    token-url: http://127.0.0.1:2/oauth/token
`
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "config", "view", "--server", "http://127.0.0.1:1/")
	if code != 0 {
		t.Fatalf("config view: code %d stderr %q", code, errOut)
	}
	if want := "warning: " + path + " holds logins and was readable by others (mode 0644); it is now 0600\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after reading: %v %v, want 0600", fi.Mode(), err)
	}
	if strings.Contains(out, "secret-") {
		t.Errorf("config view shows a token:\n%s", out)
	}
	for _, want := range []string{"token: (hidden)", "refresh-token: (hidden)", "user: carol@example.com", "# token: from the oidc login of carol@example.com in " + path} {
		if !strings.Contains(out, want) {
			t.Errorf("config view:\n%s\nwant %q", out, want)
		}
	}
	// Read again: nothing more to say.
	if code, _, errOut = runCLI(t, "config", "view"); code != 0 || errOut != "" {
		t.Errorf("second read: code %d stderr %q", code, errOut)
	}
}

// readLoginsIfAny is readLogins for a config file that may not exist.
func readLoginsIfAny(t *testing.T, path string) []savedLogin {
	t.Helper()
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return nil
	}
	return readLogins(t, path)
}

// withoutSecrets is l to print in a test's failure.
func (l savedLogin) withoutSecrets() savedLogin {
	l.Token, l.RefreshToken = "(hidden)", "(hidden)"
	return l
}

// On a terminal, login asks for the password and the terminal does not
// echo it.
func TestLoginPasswordNotEchoed(t *testing.T) {
	home := isolate(t)
	srv := usersServer(t, nil)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	var seen bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 256)
		for {
			n, err := ptmx.Read(buf)
			seen.Write(buf[:n])
			if err != nil || strings.Contains(seen.String(), "Password of alice: ") {
				return
			}
		}
	}()
	var out, errb bytes.Buffer
	root := newRoot(&out, tty)
	root.SetIn(tty)
	root.SetArgs([]string{"login", "--server", srv.URL(), "--username", "alice"})
	done := make(chan int, 1)
	go func() { done <- exitCode(root.ExecuteContext(context.Background()), &errb) }()
	<-copied
	// Type once the terminal stopped echoing, as a person would after
	// the prompt.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the terminal still echoes 10s after the prompt")
		}
	}
	if _, err := ptmx.Write([]byte("alice-password\r")); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || !strings.HasPrefix(out.String(), "Logged in to "+srv.URL()+" as alice (local, role edit), until ") {
		t.Fatalf("login: code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	tty.Close()
	rest, _ := io.ReadAll(ptmx)
	if all := seen.String() + string(rest); strings.Contains(all, "alice-password") || !strings.Contains(all, "Password of alice: ") {
		t.Errorf("the terminal showed %q: want the prompt and not the password", all)
	}
	if l := readLogins(t, filepath.Join(home, "rezuscloud", "config.yaml")); len(l) != 1 || l[0].User != "alice" {
		t.Errorf("logins %+v", l)
	}
}

// A stored login is used for its server unless a token comes from a flag
// or the environment; it comes before the context's token file, and
// another server does not get it.
func TestLoginPrecedence(t *testing.T) {
	home := isolate(t)
	cfg := writeConfig(t, home)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, "logins:\n  - server: https://prod.example.com\n    source: local\n    user: alice\n    token: rzl_x\n"...)
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	flagFile := filepath.Join(home, "flag.token")
	if err := os.WriteFile(flagFile, []byte("flag-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{want: "# token: from the local login of alice in " + cfg + "\n"},
		{args: []string{"--server", "HTTPS://prod.example.com/"}, want: "# token: from the local login of alice in " + cfg + "\n"},
		{args: []string{"--token-file", flagFile}, want: "# token: from --token-file " + flagFile + "\n"},
		{env: "env-token", want: "# token: from " + envToken + "\n"},
		{args: []string{"--server", "http://127.0.0.1:9999"}, want: "# token: from context prod (" + filepath.Join(home, "rezuscloud", "prod.token") + ")\n"},
	} {
		t.Setenv(envToken, tc.env)
		code, out, errOut := runCLI(t, append([]string{"config", "view"}, tc.args...)...)
		if code != 0 || !strings.HasSuffix(out, tc.want) {
			t.Errorf("config view %v (env %q): code %d stderr %q, stdout ends\n%s\nwant %q", tc.args, tc.env, code, errOut, out[max(0, len(out)-120):], tc.want)
		}
	}
}

// whoami names the token of the tokens file that a command sends, which
// never expires; -o json prints the server's answer.
func TestWhoamiToken(t *testing.T) {
	home := isolate(t)
	file, tokens := servertest.Tokens(t, map[string]string{"ci": "view"})
	srv := servertest.StartBackend(t, backend.Config{TokensFile: file}, nil)
	tf := filepath.Join(home, "ci.token")
	if err := os.WriteFile(tf, []byte(tokens["ci"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "whoami", "--server", srv.URL(), "--token-file", tf)
	if want := "User:      ci\nRole:      view\nSource:    token\nExpires:   never\n"; code != 0 || out != want {
		t.Errorf("whoami: code %d stdout %q stderr %q, want %q", code, out, errOut, want)
	}
	code, out, errOut = runCLI(t, "whoami", "-o", "json", "--server", srv.URL(), "--token-file", tf)
	if want := "{\n  \"user\": \"ci\",\n  \"role\": \"view\",\n  \"source\": \"token\"\n}\n"; code != 0 || out != want {
		t.Errorf("whoami -o json: code %d stdout %q stderr %q, want %q", code, out, errOut, want)
	}
	if code, _, errOut = runCLI(t, "whoami", "-o", "wide", "--server", srv.URL()); code != exitUsage || !strings.Contains(errOut, `unknown output format "wide"`) {
		t.Errorf("whoami -o wide: code %d stderr %q", code, errOut)
	}
}
