package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/sso"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

const carolPassword = "carol-password"

// ssoRig is a real OpenID provider (oidctest) with the user carol in the
// group platform, and a real server that signs people in with it and maps
// platform to edit.
func ssoRig(t *testing.T) (*oidctest.Provider, *backend.Server) {
	t.Helper()
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{
		{Username: "carol", Password: carolPassword, Email: "carol@example.com", Groups: []string{"platform"}},
	}})
	return p, ssoServer(t, p)
}

// ssoServer runs a server in the test's process whose single sign-on is
// p's, wired as `rezuscloud serve --oidc-*` wires it (cmd/rezuscloud's
// oidc.go, which a command's package cannot import): GET
// /api/v1/auth/config, and the provider's ID tokens as bearer credentials
// through backend/sso. test/cli_login_e2e_test.go runs the same login
// against the real binaries.
func ssoServer(t *testing.T, p *oidctest.Provider) *backend.Server {
	t.Helper()
	roles, err := sso.ParseRoleMap("platform=edit,platform-admins=admin")
	if err != nil {
		t.Fatal(err)
	}
	cfg := sso.Config{Issuer: p.Issuer, ClientID: p.WebClientID, ClientSecret: p.WebClientSecret, CLIClientID: p.CLIClientID, Roles: roles}
	rp, err := sso.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.StartBackend(t, backend.Config{}, func(s *backend.Server) error {
		s.HandleUnauthenticated("GET "+client.AuthConfigPath, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(client.AuthConfig{Issuer: rp.Issuer(), CLIClientID: rp.CLIClientID(), Scopes: rp.Scopes()})
		}))
		s.Tokens().AddCheck(func(name, secret string) (backend.Identity, error) {
			l, err := rp.VerifyBearer(context.Background(), secret)
			if name != "" || errors.Is(err, sso.ErrNotMine) {
				return backend.Identity{}, backend.ErrNotMine
			}
			if err != nil {
				return backend.Identity{}, err
			}
			role, err := backend.ParseRole(l.Role)
			if err != nil {
				return backend.Identity{}, err
			}
			return backend.Identity{Name: l.Email, Role: role, Source: backend.SourceOIDC, Subject: l.Subject, Email: l.Email, Expires: l.Expires}, nil
		})
		return nil
	})
}

// codeWriter is the stderr of a login that a test reads while the login
// runs: it passes on the user code once the login prints it.
type codeWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	code chan string
	sent bool
}

var userCodeLine = regexp.MustCompile(`To sign in, open (\S+) and enter the code (\S+)\n`)

func (w *codeWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if m := userCodeLine.FindStringSubmatch(w.buf.String()); m != nil && !w.sent {
		w.sent = true
		w.code <- m[1] + " " + m[2]
	}
	return len(b), nil
}

func (w *codeWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// deviceLoginAs runs `rezusctl login --server server` and approves its
// device code at p as username. It returns the exit code, stdout, stderr
// and the verification URI the login printed.
func deviceLoginAs(t *testing.T, p *oidctest.Provider, server, username, password string) (int, string, string, string) {
	t.Helper()
	var out bytes.Buffer
	errw := &codeWriter{code: make(chan string, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		root := newRoot(&out, errw)
		root.SetArgs([]string{"login", "--server", server})
		done <- exitCode(root.ExecuteContext(ctx), errw)
	}()
	var uri string
	select {
	case line := <-errw.code:
		var code string
		uri, code, _ = strings.Cut(line, " ")
		if err := p.ApproveDevice(ctx, code, username, password); err != nil {
			t.Errorf("approve the device code: %v", err)
		}
	case c := <-done:
		t.Fatalf("login ended with %d before it printed a code: %s", c, errw.String())
	}
	code := <-done
	return code, out.String(), errw.String(), uri
}

// rezusctl login signs in with the device flow at a real provider: the
// test approves the code as the person would. The login is stored (0600)
// with the ID token, the refresh token and the expiry; later commands
// authenticate with it against the real server; an ID token that has
// expired is renewed with the refresh token and saved; logout forgets it
// and revokes the refresh token.
func TestLoginDeviceFlow(t *testing.T) {
	home := isolate(t)
	p, srv := ssoRig(t)
	cfgFile := filepath.Join(home, "rezuscloud", "config.yaml")
	// The first ID token lasts 3 seconds, so that it expires within the
	// test; the renewed ones last an hour.
	p.SetIDTokenLifetime(3 * time.Second)

	before := time.Now()
	code, out, errOut, uri := deviceLoginAs(t, p, srv.URL(), "carol", carolPassword)
	if code != 0 || !strings.HasPrefix(out, "Logged in to "+srv.URL()+" as carol@example.com (oidc, role edit), until ") {
		t.Fatalf("login: code %d stdout %q stderr %q", code, out, errOut)
	}
	if uri != p.Issuer+"/device" {
		t.Errorf("verification URI %q, want the provider's device page %s/device", uri, p.Issuer)
	}
	logins := readLogins(t, cfgFile)
	if len(logins) != 1 {
		t.Fatalf("logins = %+v, want one", logins)
	}
	first := logins[0]
	claims, err := client.ParseIDToken(first.Token)
	if err != nil {
		t.Fatal(err)
	}
	if first.Server != srv.URL() || first.Source != client.LoginOIDC || first.User != "carol@example.com" ||
		first.RefreshToken == "" || first.Issuer != p.Issuer || first.ClientID != p.CLIClientID || first.TokenURL != p.Issuer+"/oauth/token" ||
		!slices.Contains(first.Scopes, "offline_access") || !slices.Contains(first.Scopes, "groups") {
		t.Errorf("stored login = %+v", first.withoutSecrets())
	}
	if claims.Issuer != p.Issuer || claims.Subject != "carol" || !first.Expiry.Equal(claims.Expiry()) ||
		first.Expiry.Before(before) || first.Expiry.After(time.Now().Add(5*time.Second)) {
		t.Errorf("ID token claims %+v, stored expiry %s: want carol's, about 3s after the login", claims, first.Expiry)
	}

	// The ID token expires; the next command renews it before it asks.
	time.Sleep(time.Until(first.Expiry.Add(time.Second)))
	p.SetIDTokenLifetime(time.Hour)
	stale, _ := client.New(client.Options{Server: srv.URL(), Token: first.Token})
	if _, err := stale.Whoami(context.Background()); client.Code(err) != http.StatusUnauthorized {
		t.Errorf("the server took the expired ID token: %v", err)
	}
	code, out, errOut = runCLI(t, "whoami", "--server", srv.URL())
	if code != 0 {
		t.Fatalf("whoami after expiry: code %d stderr %q", code, errOut)
	}
	renewed := readLogins(t, cfgFile)[0]
	if renewed.Token == first.Token || !renewed.Expiry.After(time.Now().Add(50*time.Minute)) || renewed.RefreshToken == "" || renewed.User != "carol@example.com" {
		t.Errorf("after expiry the login is %+v, want a renewed ID token that lasts an hour", renewed.withoutSecrets())
	}
	for _, want := range []string{"User:      carol@example.com\n", "Role:      edit\n", "Source:    oidc\n", "Subject:   carol\n",
		"Expires:   " + renewed.Expiry.UTC().Format(time.RFC3339) + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("whoami prints\n%s\nwant a line %q", out, want)
		}
	}
	// A command with a fresh token sends it as it is.
	if code, _, errOut = runCLI(t, "get", "tenants", "--server", srv.URL()); code != 0 || !strings.HasPrefix(errOut, "No resources found") {
		t.Errorf("get tenants: code %d stderr %q", code, errOut)
	}
	if again := readLogins(t, cfgFile)[0]; again.Token != renewed.Token {
		t.Errorf("a valid ID token was renewed again")
	}

	code, out, errOut = runCLI(t, "logout", "--server", srv.URL())
	if code != 0 || out != "Logged out of "+srv.URL()+" (carol@example.com).\n" || errOut != "" {
		t.Fatalf("logout: code %d stdout %q stderr %q", code, out, errOut)
	}
	if got := readLogins(t, cfgFile); len(got) != 0 {
		t.Errorf("logins after logout: %+v", got)
	}
	// The provider revoked the refresh token.
	gone := renewed.Login
	gone.Expiry = time.Now().Add(-time.Minute)
	_, err = client.NewRefreshing(gone, nil, nil).Bearer(context.Background())
	if err == nil || !strings.Contains(err.Error(), "could not be renewed: the provider refused: invalid_grant") {
		t.Errorf("the refresh token after logout: %v, want the provider's refusal", err)
	}
}

// A login whose refresh the provider refuses (the person left it) ends
// with the provider's reason and how to log in again.
func TestLoginRefreshRefused(t *testing.T) {
	home := isolate(t)
	p, srv := ssoRig(t)
	p.SetIDTokenLifetime(2 * time.Second)
	if code, _, errOut, _ := deviceLoginAs(t, p, srv.URL(), "carol", carolPassword); code != 0 {
		t.Fatalf("login: code %d stderr %q", code, errOut)
	}
	l := readLogins(t, filepath.Join(home, "rezuscloud", "config.yaml"))[0]
	p.RemoveUser("carol")
	time.Sleep(time.Until(l.Expiry.Add(time.Second)))
	code, out, errOut := runCLI(t, "get", "tenants", "--server", srv.URL())
	prefix := "error: the login of carol@example.com expired at " + l.Expiry.UTC().Format(time.RFC3339) + " and could not be renewed: the provider refused: "
	if code != exitUsage || out != "" || !strings.HasPrefix(errOut, prefix) || !strings.HasSuffix(errOut, "; log in again with rezusctl login\n") {
		t.Errorf("get tenants: code %d stdout %q stderr %q, want %q...", code, out, errOut, prefix)
	}
}

// A person the provider refuses to vouch for stores nothing.
func TestLoginDeviceWrongPassword(t *testing.T) {
	home := isolate(t)
	p, srv := ssoRig(t)
	var out bytes.Buffer
	errw := &codeWriter{code: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		root := newRoot(&out, errw)
		root.SetArgs([]string{"login", "--server", srv.URL()})
		done <- exitCode(root.ExecuteContext(ctx), errw)
	}()
	_, code, _ := strings.Cut(<-errw.code, " ")
	if err := p.ApproveDevice(ctx, code, "carol", "wrong"); err == nil {
		t.Error("the provider approved a wrong password")
	}
	cancel()
	if c := <-done; c != exitUsage || !strings.Contains(errw.String(), "error: the login was interrupted before the sign-in\n") {
		t.Errorf("interrupted login: code %d stderr %q", c, errw.String())
	}
	if got := readLoginsIfAny(t, filepath.Join(home, "rezuscloud", "config.yaml")); len(got) != 0 {
		t.Errorf("logins: %+v", got)
	}
}

// rezusctl login --browser signs in with the code flow and PKCE: $BROWSER
// opens the provider's page (here a script that notes the address, and
// the test signs in there as the person would), the provider sends the
// browser back to the login's port on 127.0.0.1, and the login is stored.
// An answer with another state is refused while the login goes on
// waiting.
func TestLoginBrowser(t *testing.T) {
	home := isolate(t)
	p, srv := ssoRig(t)
	dir := t.TempDir()
	noted := filepath.Join(dir, "url")
	script := filepath.Join(dir, "browser")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s' \"$1\" > "+noted+".tmp && mv "+noted+".tmp "+noted+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BROWSER", script)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		root := newRoot(&out, &errb)
		root.SetArgs([]string{"login", "--browser", "--server", srv.URL()})
		done <- exitCode(root.ExecuteContext(ctx), &errb)
	}()
	var authURL string
	for authURL == "" {
		select {
		case c := <-done:
			t.Fatalf("login ended with %d before the browser opened: %s", c, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		b, _ := os.ReadFile(noted)
		authURL = string(b)
	}
	au, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	q := au.Query()
	if !strings.HasPrefix(authURL, p.Issuer+"/") || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
		q.Get("state") == "" || q.Get("nonce") == "" || q.Get("client_id") != p.CLIClientID || !strings.HasPrefix(q.Get("redirect_uri"), "http://127.0.0.1:") {
		t.Fatalf("the browser opened %s, want the provider's authorization with PKCE, state and nonce", authURL)
	}

	back, err := p.Login(ctx, authURL, "carol", carolPassword)
	if err != nil {
		t.Fatal(err)
	}
	forged := *back
	fq := forged.Query()
	fq.Set("state", "another")
	forged.RawQuery = fq.Encode()
	if resp, err := http.Get(forged.String()); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an answer with another state: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	resp, err := http.Get(back.String())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Signed in.") {
		t.Errorf("the browser's page: %s %s", resp.Status, page)
	}
	if c := <-done; c != 0 || !strings.HasPrefix(out.String(), "Logged in to "+srv.URL()+" as carol@example.com (oidc, role edit), until ") {
		t.Fatalf("login: code %d stdout %q stderr %q", c, out.String(), errb.String())
	}
	l := readLogins(t, filepath.Join(home, "rezuscloud", "config.yaml"))[0]
	if l.RefreshToken == "" || l.Source != client.LoginOIDC || l.ClientID != p.CLIClientID {
		t.Errorf("stored login %+v", l.withoutSecrets())
	}
	if code, out, errOut := runCLI(t, "whoami", "--server", srv.URL()); code != 0 || !strings.Contains(out, "Role:      edit\n") {
		t.Errorf("whoami: code %d stdout %q stderr %q", code, out, errOut)
	}
}

// A person whose groups give no role signs in at the provider, but the
// server refuses the login: login says so and stores nothing.
func TestLoginNoRole(t *testing.T) {
	home := isolate(t)
	p, srv := ssoRig(t)
	p.AddUser(oidctest.User{Username: "frank", Password: "frank-password", Email: "frank@example.com", Groups: []string{"sales"}})
	code, out, errOut, _ := deviceLoginAs(t, p, srv.URL(), "frank", "frank-password")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "error: frank@example.com signed in at the provider, but the server refuses the login: ") ||
		!strings.Contains(errOut, "sales") {
		t.Errorf("login: code %d stdout %q stderr %q", code, out, errOut)
	}
	if got := readLoginsIfAny(t, filepath.Join(home, "rezuscloud", "config.yaml")); len(got) != 0 {
		t.Errorf("logins: %+v", got)
	}
}
