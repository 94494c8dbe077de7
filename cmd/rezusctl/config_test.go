package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// isolate points rezusctl's config and environment at a fresh directory.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("HOME", dir)
	for _, k := range []string{envConfig, envContext, envServer, envToken, envTokenFile} {
		t.Setenv(k, "")
	}
	return dir
}

const testConfig = `current-context: prod
contexts:
  - name: prod
    server: https://prod.example.com
    token-file: prod.token
  - name: dev
    server: http://127.0.0.1:9999
`

func writeConfig(t *testing.T, home string) string {
	t.Helper()
	dir := filepath.Join(home, "rezuscloud")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(testConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prod.token"), []byte("prod-secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "config.yaml")
}

func TestConnectionPrecedence(t *testing.T) {
	home := isolate(t)
	cfg := writeConfig(t, home)
	tokenFile := filepath.Join(home, "flag.token")
	if err := os.WriteFile(tokenFile, []byte("  flag-secret-token  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		server string
		token  string
	}{
		{"current context", nil, nil, "https://prod.example.com (from context prod)", "from context prod (" + filepath.Join(home, "rezuscloud", "prod.token") + ")"},
		{"--context", nil, []string{"--context", "dev"}, "http://127.0.0.1:9999 (from context dev)", "none"},
		{"env context", map[string]string{envContext: "dev"}, nil, "http://127.0.0.1:9999 (from context dev)", "none"},
		{"env beats context", map[string]string{envServer: "http://env.example", envToken: "env-secret-token"}, nil, "http://env.example (from REZUSCLOUD_SERVER)", "from REZUSCLOUD_TOKEN"},
		{"flag beats env", map[string]string{envServer: "http://env.example", envToken: "env-secret-token"}, []string{"--server", "http://flag.example", "--token-file", tokenFile}, "http://flag.example (from --server)", "from --token-file " + tokenFile},
		{"--config", nil, []string{"--config", cfg, "--context", "dev"}, "http://127.0.0.1:9999 (from context dev)", "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errOut := runCLI(t, append([]string{"config", "view"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("code %d stderr %q", code, errOut)
			}
			if !strings.Contains(out, "# server: "+tc.server+"\n") || !strings.Contains(out, "# token: "+tc.token+"\n") {
				t.Errorf("config view:\n%s\nwant server %q and token %q", out, tc.server, tc.token)
			}
			if strings.Contains(out, "secret-token") {
				t.Errorf("config view shows a token:\n%s", out)
			}
		})
	}
}

func TestConnectionErrors(t *testing.T) {
	home := isolate(t)
	writeConfig(t, home)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "tenants", "--context", "staging"}, `context "staging" (from --context) is not in the config file`},
		{[]string{"get", "tenants", "--token", "a", "--token-file", "b"}, "give --token or --token-file, not both"},
		{[]string{"get", "tenants", "--token-file", filepath.Join(home, "missing")}, "--token-file: open "},
		{[]string{"get", "tenants", "--server", "ftp://x"}, `server URL "ftp://x": want an http:// or https:// URL (from --server)`},
		{[]string{"get", "tenants", "--config", filepath.Join(home, "nope.yaml")}, "config file: open "},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "error: "+tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: code %d stdout %q stderr %q, want 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	bad := filepath.Join(home, "bad.yaml")
	if err := os.WriteFile(bad, []byte("contexts:\n  - name: a\n    sever: http://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, "get", "tenants", "--config", bad)
	if code != 2 || !strings.Contains(errOut, bad) || !strings.Contains(errOut, `"sever"`) {
		t.Errorf("unknown key: code %d stderr %q, want the file and the key named", code, errOut)
	}
}

// TestTokenNeverPrinted runs a verbose request to a closed port with a
// token: neither the trace nor the error may show it.
func TestTokenNeverPrinted(t *testing.T) {
	isolate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "http://" + ln.Addr().String()
	ln.Close()
	const token = "very-secret-token-value"
	code, out, errOut := runCLI(t, "-v", "get", "tenants", "--server", server, "--token", token)
	if code != 2 || out != "" {
		t.Fatalf("code %d stdout %q", code, out)
	}
	if !strings.Contains(errOut, "GET "+server+"/api/v1/tenants?limit=1000 -> no answer") || !strings.HasSuffix(errOut, "error: cannot reach "+server+": connection refused\n") {
		t.Errorf("stderr %q, want the trace and the connection error", errOut)
	}
	if strings.Contains(errOut, token) {
		t.Errorf("stderr shows the token: %q", errOut)
	}
}

func TestConfigContexts(t *testing.T) {
	home := isolate(t)
	path := filepath.Join(home, "rezuscloud", "config.yaml")
	code, out, errOut := runCLI(t, "config", "set-context", "prod", "--server", "https://prod.example.com", "--token-file", "~/.config/prod.token")
	if code != 0 || !strings.Contains(out, `Context "prod" set`) {
		t.Fatalf("set-context: code %d stdout %q stderr %q", code, out, errOut)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, mode %v; want 0600", err, st.Mode())
	}
	runCLI(t, "config", "set-context", "dev", "--server", "http://127.0.0.1:9")
	if code, out, _ := runCLI(t, "config", "current-context"); code != 0 || out != "prod\n" {
		t.Errorf("current-context after the first set-context: %d %q, want prod", code, out)
	}
	if code, _, errOut := runCLI(t, "config", "use-context", "nope"); code != 2 || !strings.Contains(errOut, `no context "nope"`) {
		t.Errorf("use-context nope: %d %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "config", "use-context", "dev"); code != 0 {
		t.Fatal("use-context dev failed")
	}
	code, out, _ = runCLI(t, "config", "get-contexts")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "          prod") || !strings.HasPrefix(lines[2], "*") || !strings.Contains(lines[2], "http://127.0.0.1:9") {
		t.Errorf("get-contexts:\n%s", out)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "current-context: dev\n") || !strings.Contains(string(b), "token-file: ~/.config/prod.token\n") {
		t.Errorf("config file:\n%s", b)
	}
	// set-context changes only what it is given.
	runCLI(t, "config", "set-context", "prod", "--server", "https://prod2.example.com")
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), "server: https://prod2.example.com\n  token-file: ~/.config/prod.token\n") {
		t.Errorf("after changing the server:\n%s", b)
	}
}
