package test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestCLILoginE2E: the real rezusctl signs in to the real `rezuscloud
// serve --oidc-*` with the device flow at a real OpenID provider, the test
// approving the code as the person would; the login is stored with mode
// 0600; whoami and get authenticate with it; an ID token that expired is
// renewed with the refresh token and saved; logout forgets it.
func TestCLILoginE2E(t *testing.T) {
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{
		{Username: "dana", Password: "dana-password", Email: "dana@example.com", Groups: []string{"platform"}},
		{Username: "gus", Password: "gus-password", Email: "gus@example.com", Groups: []string{"sales"}},
	}})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(p.WebClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, servertest.Options{Args: []string{"--oidc-issuer", p.Issuer, "--oidc-client-id", p.WebClientID,
		"--oidc-client-secret-file", secret, "--oidc-cli-client-id", p.CLIClientID, "--oidc-role-map", "platform=edit"}})
	cli := servertest.CLI(t)
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "REZUSCLOUD_SERVER="+srv.URL(),
		"REZUSCLOUD_TOKEN=", "REZUSCLOUD_TOKEN_FILE=", "REZUSCLOUD_CONFIG=", "REZUSCLOUD_CONTEXT=", "BROWSER=")
	rezusctl := func(args ...string) (string, string, error) {
		var out, errb strings.Builder
		cmd := exec.Command(cli, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	if _, errOut, err := rezusctl("get", "tenants"); err == nil || !strings.Contains(errOut, "401") {
		t.Fatalf("get tenants without a login: %v %q, want a refusal", err, errOut)
	}

	// A person in no group with a role signs in at the provider, and the
	// server refuses the login, which is not stored.
	cfgFile := filepath.Join(home, "rezuscloud", "config.yaml")
	out, printed, err := cliDeviceLogin(t, p, cli, env, "gus", "gus-password")
	if err == nil || out != "" || !strings.Contains(printed, "error: gus@example.com signed in at the provider, but the server refuses the login: ") {
		t.Errorf("login of a person without a role: %v, stdout %q, stderr %q", err, out, printed)
	}
	if _, err := os.Stat(cfgFile); !os.IsNotExist(err) {
		t.Errorf("a refused login wrote the config file: %v", err)
	}

	// The first ID token lasts 3 seconds, to expire within the test.
	p.SetIDTokenLifetime(3 * time.Second)
	out, printed, err = cliDeviceLogin(t, p, cli, env, "dana", "dana-password")
	if err != nil || !strings.HasPrefix(out, "Logged in to "+srv.URL()+" as dana@example.com (oidc, role edit), until ") {
		t.Fatalf("login: %v, stdout %q, stderr %q", err, out, printed)
	}
	p.SetIDTokenLifetime(time.Hour)

	first := storedLogin(t, cfgFile)
	if first.Source != client.LoginOIDC || first.User != "dana@example.com" || first.RefreshToken == "" || first.ClientID != p.CLIClientID ||
		first.Issuer != p.Issuer || time.Until(first.Expiry) > 4*time.Second {
		t.Errorf("stored login: source %s user %s client %s issuer %s expiry %s refresh token %t",
			first.Source, first.User, first.ClientID, first.Issuer, first.Expiry, first.RefreshToken != "")
	}

	time.Sleep(time.Until(first.Expiry.Add(time.Second)))
	whoami, errOut, err := rezusctl("whoami")
	if err != nil {
		t.Fatalf("whoami after the ID token expired: %v %q", err, errOut)
	}
	renewed := storedLogin(t, cfgFile)
	if renewed.Token == first.Token || time.Until(renewed.Expiry) < 50*time.Minute {
		t.Errorf("after expiry the stored ID token was not renewed (expiry %s)", renewed.Expiry)
	}
	for _, want := range []string{"User:      dana@example.com\n", "Role:      edit\n", "Source:    oidc\n", "Expires:   " + renewed.Expiry.UTC().Format(time.RFC3339) + "\n"} {
		if !strings.Contains(whoami, want) {
			t.Errorf("whoami:\n%s\nwant a line %q", whoami, want)
		}
	}
	if _, errOut, err := rezusctl("get", "tenants"); err != nil || !strings.HasPrefix(errOut, "No resources found") {
		t.Errorf("get tenants with the login: %v %q", err, errOut)
	}
	if out, errOut, err := rezusctl("logout"); err != nil || out != "Logged out of "+srv.URL()+" (dana@example.com).\n" || errOut != "" {
		t.Errorf("logout: %v %q %q", err, out, errOut)
	}
	if _, errOut, err := rezusctl("whoami"); err == nil || !strings.Contains(errOut, "401") {
		t.Errorf("whoami after logout: %v %q, want a refusal", err, errOut)
	}
}

// cliDeviceLogin runs `rezusctl login` and approves the device code it
// prints as user would at the provider's device page. It returns what
// the login printed on stdout and stderr, and how it ended.
func cliDeviceLogin(t *testing.T, p *oidctest.Provider, cli string, env []string, user, password string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	login := exec.CommandContext(ctx, cli, "login")
	login.Env = env
	var out strings.Builder
	login.Stdout = &out
	stderr, err := login.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	codeLine := regexp.MustCompile(`^To sign in, open (\S+) and enter the code (\S+)$`)
	var printed strings.Builder
	for lines := bufio.NewScanner(stderr); lines.Scan(); {
		printed.WriteString(lines.Text() + "\n")
		if m := codeLine.FindStringSubmatch(lines.Text()); m != nil {
			if m[1] != p.Issuer+"/device" {
				t.Errorf("verification URI %s, want %s/device", m[1], p.Issuer)
			}
			if err := p.ApproveDevice(ctx, m[2], user, password); err != nil {
				t.Error(err)
			}
		}
	}
	err = login.Wait()
	return out.String(), printed.String(), err
}

// storedLogin reads the one login of the config file, which must have
// mode 0600.
func storedLogin(t *testing.T, path string) client.Login {
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
	var cfg struct {
		Logins []struct {
			Server string `json:"server"`
			client.Login
		} `json:"logins"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil || len(cfg.Logins) != 1 {
		t.Fatalf("%s: %v, %d logins", path, err, len(cfg.Logins))
	}
	return cfg.Logins[0].Login
}
