package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

func TestPrintTokens(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	exp, past, used := now.Add(30*24*time.Hour), now.Add(-2*time.Hour), now.Add(-5*time.Minute)
	list := []api.TokenInfo{
		{Name: "admin", Role: "admin", Source: "file", LastUsed: &used},
		{Name: "ci", Owner: "platform-team", Role: "edit", Source: "file", ExpiresAt: &exp},
		{Name: "old", Role: "view", Source: "file", ExpiresAt: &past, Expired: true},
		{Name: "run-alpha", Role: "edit", Source: "ephemeral"},
	}
	var out, errOut bytes.Buffer
	if err := printTokens(&out, &errOut, list, false, &getOptions{output: outTable}, now); err != nil {
		t.Fatal(err)
	}
	want := `NAME        OWNER           ROLE      SOURCE      EXPIRES                                   LAST USED
admin       <none>          admin     file        never                                     5m ago
ci          platform-team   edit      file        2027-01-04T12:00:00Z (in 30d)             never
old         <none>          view      file        2026-12-05T10:00:00Z (expired 120m ago)   never
run-alpha   <none>          edit      ephemeral   never                                     never
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printTokens(&out, &errOut, list[:2], false, &getOptions{output: outName}, now)
	if out.String() != "token/admin\ntoken/ci\n" {
		t.Errorf("-o name: %q", out.String())
	}
	out.Reset()
	printTokens(&out, &errOut, nil, false, &getOptions{output: outTable}, now)
	if out.String() != "" || errOut.String() != "No tokens found.\n" {
		t.Errorf("empty list: %q, %q", out.String(), errOut.String())
	}
}

// TestGetTokens: rezusctl get tokens against a real server lists the
// tokens file's tokens for an admin, never a secret, and tells a viewer
// that it needs admin.
func TestGetTokens(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	var lines []string
	secrets := map[string]string{}
	for _, e := range []struct {
		name string
		role backend.Role
		opts backend.TokenOptions
	}{
		{"admin", backend.RoleAdmin, backend.TokenOptions{}},
		{"ci", backend.RoleEdit, backend.TokenOptions{Expires: time.Now().Add(720 * time.Hour), Owner: "platform-team"}},
		{"viewer", backend.RoleView, backend.TokenOptions{}},
	} {
		tok, line, err := backend.NewTokenFor(e.name, e.role, e.opts)
		if err != nil {
			t.Fatal(err)
		}
		secrets[e.name] = tok
		lines = append(lines, line)
		os.WriteFile(filepath.Join(dir, e.name), []byte(tok+"\n"), 0o600)
	}
	file := filepath.Join(dir, "tokens")
	os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	srv := servertest.StartBackend(t, backend.Config{TokensFile: file}, nil)
	t.Setenv(envServer, srv.URL())

	code, out, errOut := runCLI(t, "get", "tokens", "--token-file", filepath.Join(dir, "admin"))
	if code != 0 || errOut != "" {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	want := regexp.MustCompile(`^NAME +OWNER +ROLE +SOURCE +EXPIRES +LAST USED
admin +<none> +admin +file +never +\d+s ago
ci +platform-team +edit +file +\S+Z \(in (29d|30d)\) +never
viewer +<none> +view +file +never +never
$`)
	if !want.MatchString(out) {
		t.Errorf("get tokens:\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Error("get tokens printed a secret")
		}
	}
	code, out, _ = runCLI(t, "get", "tokens", "ci", "-o", "json", "--token-file", filepath.Join(dir, "admin"))
	if code != 0 || !strings.Contains(out, `"owner": "platform-team"`) || !strings.Contains(out, `"total": 1`) {
		t.Errorf("get tokens ci -o json: code %d\n%s", code, out)
	}
	code, _, errOut = runCLI(t, "get", "tokens", "--token-file", filepath.Join(dir, "viewer"))
	if code == 0 || !strings.Contains(errOut, "listing tokens needs admin") {
		t.Errorf("a viewer's get tokens: code %d, %q", code, errOut)
	}
	code, _, errOut = runCLI(t, "get", "tokens", "nobody", "--token-file", filepath.Join(dir, "admin"))
	if code != exitFailed || !strings.Contains(errOut, `token "nobody" not found`) {
		t.Errorf("get tokens nobody: code %d, %q", code, errOut)
	}
}
