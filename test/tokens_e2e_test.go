package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// tokensCreate runs `rezuscloud token create ARGS` and returns the token
// and its tokens-file line.
func tokensCreate(t *testing.T, bin string, args ...string) (token, line string) {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"token", "create"}, args...)...).Output()
	if err != nil {
		t.Fatalf("rezuscloud token create %v: %v", args, err)
	}
	parts := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(parts) != 4 {
		t.Fatalf("rezuscloud token create printed:\n%s", out)
	}
	return parts[1], parts[3]
}

// tokensList answers GET /api/v1/tokens for the admin, by name.
func tokensList(t *testing.T, s *servertest.Server, admin string) map[string]api.TokenInfo {
	t.Helper()
	code, body := s.Request("GET", "/api/v1/tokens", nil, http.Header{"Authorization": {"Bearer " + admin}})
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/tokens: %d %s", code, body)
	}
	var l api.List[api.TokenInfo]
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	out := map[string]api.TokenInfo{}
	for _, ti := range l.Items {
		out[ti.Name] = ti
	}
	return out
}

// tokensAudit returns the audit log's lines whose msg is msg.
func tokensAudit(t *testing.T, data, msg string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("audit.log: %v: %s", err, sc.Bytes())
		}
		if line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}

// TestTokenLifecycle runs the real server with a tokens file whose CI
// token, made by `rezuscloud token create --expires 3s --owner`, expires
// while the server runs: it works until then and is refused after, with a
// 401 that says when it expired and an audit line that names it without
// its secret. The last use of each token survives a restart, and a
// reload that changes a role is audited.
func TestTokenLifecycle(t *testing.T) {
	bin := servertest.Binary(t)
	admin, adminLine := tokensCreate(t, bin, "ops", "admin", "--owner", "alice")
	viewer, viewerLine := tokensCreate(t, bin, "reader", "view")
	ci, ciLine := tokensCreate(t, bin, "ci", "edit", "--expires", "3s", "--owner", "platform-team")
	if !strings.Contains(ciLine, " expires=") || !strings.HasSuffix(ciLine, " owner=platform-team") {
		t.Fatalf("the CI token's line %q lacks its expiry or owner", ciLine)
	}
	file := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(file, []byte(adminLine+"\n"+viewerLine+"\n"+ciLine+"\n"), 0o600)
	s := servertest.Start(t, servertest.Options{TokensFile: file})
	get := func(token string) (int, []byte) {
		return s.Request("GET", "/api/v1/tenants", nil, http.Header{"Authorization": {"Bearer " + token}})
	}

	if code, body := get(ci); code != http.StatusOK {
		t.Fatalf("the CI token before its expiry: %d %s", code, body)
	}
	get(viewer)
	before := tokensList(t, s, admin)
	if got := before["ci"]; got.Owner != "platform-team" || got.Role != "edit" || got.Source != "file" || got.ExpiresAt == nil || got.LastUsed == nil || got.Expired {
		t.Fatalf("the CI token in the list: %+v", got)
	}
	expires := *before["ci"].ExpiresAt
	time.Sleep(time.Until(expires) + 100*time.Millisecond)
	code, body := get(ci)
	if code != http.StatusUnauthorized || !strings.Contains(string(body), `token \"ci\" expired at `+expires.UTC().Format(time.RFC3339)) {
		t.Fatalf("the CI token after its expiry: %d %s", code, body)
	}
	lines := tokensAudit(t, s.Data(), "token used after expiry")
	if len(lines) != 1 || lines[0]["who"] != "ci" || lines[0]["source"] != "token" || lines[0]["expired"] != expires.UTC().Format(time.RFC3339) {
		t.Errorf("audit of the expired token's use: %v", lines)
	}
	audit, _ := os.ReadFile(filepath.Join(s.Data(), "audit.log"))
	for _, secret := range []string{admin, viewer, ci} {
		if strings.Contains(string(audit), secret) || strings.Contains(s.Log(), secret) {
			t.Error("a token's secret reached the audit log or the server log")
		}
	}
	if l := tokensList(t, s, admin)["ci"]; !l.Expired {
		t.Errorf("the list does not mark the CI token expired: %+v", l)
	}

	// The last uses survive a restart: after it, this process has seen no
	// use of ci or reader, so the list reads them from the store.
	s.Stop()
	s.Start()
	after := tokensList(t, s, admin)
	for _, name := range []string{"ci", "reader"} {
		if b, a := before[name].LastUsed, after[name].LastUsed; a == nil || !a.Equal(*b) {
			t.Errorf("%s's last use after the restart is %v, want %v", name, a, b)
		}
	}

	// rezusctl get tokens shows the same.
	out, err := exec.Command(servertest.CLI(t), "get", "tokens", "--server", s.URL(), "--token", admin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "platform-team") || !strings.Contains(string(out), "(expired ") || strings.Contains(string(out), admin) {
		t.Errorf("rezusctl get tokens: %v\n%s", err, out)
	}

	// A reload that makes the reader an editor is audited.
	os.WriteFile(file, []byte(adminLine+"\n"+strings.Replace(viewerLine, "reader view ", "reader edit ", 1)+"\n"+ciLine+"\n"), 0o600)
	s.Signal(syscall.SIGHUP)
	s.WaitFor("the reload's audit line", func() bool { return len(tokensAudit(t, s.Data(), "role changed")) > 0 })
	changed := tokensAudit(t, s.Data(), "role changed")
	if len(changed) != 1 || changed[0]["who"] != "reader" || changed[0]["from"] != "view" || changed[0]["to"] != "edit" {
		t.Errorf("audit of the reload: %v", changed)
	}
}
