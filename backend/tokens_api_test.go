package backend

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
)

// lifecycleServer starts a server whose tokens file holds an admin, a CI
// token that expires an hour after clock's time with an owner, and a
// viewer; its audit log is returned.
func lifecycleServer(t *testing.T, clock *testClock) (*testServer, string, *syncBuffer) {
	t.Helper()
	toks := testTokens{}
	var lines []string
	for _, e := range []struct {
		name string
		role Role
		opts TokenOptions
	}{
		{"admin", RoleAdmin, TokenOptions{}},
		{"ci", RoleEdit, TokenOptions{Expires: clock.Now().Add(time.Hour), Owner: "platform-team"}},
		{"viewer", RoleView, TokenOptions{}},
	} {
		tok, line, err := NewTokenFor(e.name, e.role, e.opts)
		if err != nil {
			t.Fatal(err)
		}
		toks[e.name] = tok
		lines = append(lines, line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{TokensFile: path, SessionClock: clock.Now}, false)
	ts.tokens = toks
	audit := &syncBuffer{}
	ts.SetAudit(slog.New(slog.NewTextHandler(audit, nil)))
	return ts, path, audit
}

// TestExpiredTokenRefused: a token works until its expiry and is refused
// from then on with a 401 that says it expired and when; the refusal is
// audited with the token's name, never its secret.
func TestExpiredTokenRefused(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	ts, _, audit := lifecycleServer(t, clock)

	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants", token: "ci"})
	wantCode(t, "before expiry", code, body, http.StatusOK)
	clock.Add(time.Hour)
	for _, r := range []req{
		{method: "GET", path: "/api/v1/tenants", token: "ci"},
		{method: "GET", path: "/api/v1/tenants", bearer: ts.tokens["ci"]},
	} {
		code, body = ts.do(t, r)
		wantCode(t, "at expiry", code, body, http.StatusUnauthorized)
		wantAPIError(t, body, http.StatusUnauthorized, api.ReasonUnauthorized, `token "ci" expired at 2026-12-05T11:00:00Z`)
	}
	// The first use is audited as it comes, and the second, in the same
	// minute, counted in one line at the minute's end (or the server's).
	logs := audit.String()
	if n := strings.Count(logs, `msg="token used after expiry" who=ci source=token role=edit expired=2026-12-05T11:00:00Z`); n != 1 {
		t.Errorf("the audit log has %d lines of the expired token's uses, want 1:\n%s", n, logs)
	}
	ts.Server.refused.close()
	logs = audit.String()
	if !strings.Contains(logs, `msg="token used after expiry (repeated)" who=ci source=token role=edit expired=2026-12-05T11:00:00Z`) ||
		!strings.Contains(logs, " repeated=1 since=") {
		t.Errorf("the audit log does not count the second use:\n%s", logs)
	}
	if strings.Contains(logs, ts.tokens["ci"]) || strings.Contains(ts.logs.String(), ts.tokens["ci"]) {
		t.Error("the secret of the expired token reached a log")
	}
	// A dashboard login with it is refused too.
	if _, _, err := ts.Sessions().Login("127.0.0.1:1", ts.tokens["ci"]); err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Errorf("login with the expired token: %v", err)
	}
}

// TestTokensList: GET /api/v1/tokens answers admins only, with each
// token's owner, role, source, expiry and last use, and no secret or
// digest.
func TestTokensList(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	ts, path, _ := lifecycleServer(t, clock)
	for _, who := range []string{"viewer", "ci"} {
		code, body := ts.do(t, req{method: "GET", path: TokensPath, token: who})
		wantCode(t, who, code, body, http.StatusForbidden)
	}
	clock.Add(time.Minute)
	ts.Tokens().Ephemeral("run-alpha", RoleEdit)
	code, body := ts.do(t, req{method: "GET", path: TokensPath, token: "admin"})
	wantCode(t, "admin", code, body, http.StatusOK)
	var l api.List[api.TokenInfo]
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	exp := time.Date(2026, 12, 5, 11, 0, 0, 0, time.UTC)
	first := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	used := first.Add(time.Minute)
	want := []api.TokenInfo{
		{Name: "admin", Role: "admin", Source: "file", LastUsed: &used},
		{Name: "ci", Owner: "platform-team", Role: "edit", Source: "file", ExpiresAt: &exp, LastUsed: &first},
		{Name: "viewer", Role: "view", Source: "file", LastUsed: &first},
		{Name: "run-alpha", Role: "edit", Source: "ephemeral"},
	}
	got, _ := json.Marshal(l.Items)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) || l.Total != 4 {
		t.Errorf("tokens list:\n%s\nwant\n%s", got, wantJSON)
	}
	file, _ := os.ReadFile(path)
	for _, line := range strings.Split(strings.TrimSpace(string(file)), "\n") {
		digest := strings.Fields(line)[2]
		if strings.Contains(string(body), digest) {
			t.Errorf("the list holds a digest: %s", body)
		}
	}
	for _, secret := range ts.tokens {
		if strings.Contains(string(body), secret) {
			t.Errorf("the list holds a secret")
		}
	}
	clock.Add(time.Hour)
	code, body = ts.do(t, req{method: "GET", path: TokensPath, token: "admin"})
	wantCode(t, "admin", code, body, http.StatusOK)
	if !strings.Contains(string(body), `"expiresAt":"2026-12-05T11:00:00Z","expired":true`) {
		t.Errorf("an expired token is not marked expired: %s", body)
	}
}

// TestLastUsedResolution: uses of a token within a minute of the last one
// queued are kept in memory only; the flush writes the latest queued use,
// never an older one over a newer one that another replica wrote, and the
// server's Close flushes what is queued.
func TestLastUsedResolution(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	ts, _, _ := lifecycleServer(t, clock)
	st := ts.Store()
	stored := func(name string) (at time.Time) {
		st.View(func(tx store.Tx) error { at = storedLastUsed(tx, name); return nil })
		return at
	}
	t0 := clock.Now()
	ts.do(t, req{method: "GET", path: "/api/v1/tenants", token: "ci"})
	clock.Add(30 * time.Second)
	ts.do(t, req{method: "GET", path: "/api/v1/tenants", token: "ci"})
	if q := ts.Tokens().used.take(); len(q) != 1 || !q["ci"].Equal(t0) {
		t.Fatalf("queued after two uses within a minute: %v, want ci at %v only", q, t0)
	}
	ts.Tokens().used.requeue(map[string]time.Time{"ci": t0})
	if err := writeLastUsed(st, ts.Tokens()); err != nil {
		t.Fatal(err)
	}
	if got := stored("ci"); !got.Equal(t0) {
		t.Fatalf("stored last use %v, want %v", got, t0)
	}
	if seen := ts.Tokens().used.seen("ci"); !seen.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("in memory: %v, want the latest use", seen)
	}

	// Another replica wrote a later use: an earlier one does not replace it.
	later := t0.Add(10 * time.Minute)
	st.Update(func(tx store.Tx) error {
		return tx.PutSeries(lastUsedPrefix+"ci", []byte(later.Format(time.RFC3339Nano)))
	})
	clock.Add(time.Minute)
	ts.do(t, req{method: "GET", path: "/api/v1/tenants", token: "ci"})
	if err := writeLastUsed(st, ts.Tokens()); err != nil {
		t.Fatal(err)
	}
	if got := stored("ci"); !got.Equal(later) {
		t.Errorf("stored last use %v, want the other replica's %v", got, later)
	}

	// Close flushes the queue before the store closes.
	clock.Add(time.Hour)
	ts.do(t, req{method: "GET", path: "/api/v1/tenants", token: "admin"})
	dir := ts.cfg.DataDir
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	defer s.Close()
	s.View(func(tx store.Tx) error {
		if got := storedLastUsed(tx, "admin"); !got.Equal(clock.Now()) {
			t.Errorf("after Close the store holds admin's last use %v, want %v", got, clock.Now())
		}
		return nil
	})
}

// TestReloadAuditsRoleChanges: a reload that changes a token's role or
// removes it writes a role change to the audit log; one that changes
// nothing writes none.
func TestReloadAuditsRoleChanges(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	ts, path, audit := lifecycleServer(t, clock)
	if err := ts.Tokens().Reload(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(audit.String(), "role changed") {
		t.Fatalf("a reload of the same file audited a role change:\n%s", audit)
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	viewer := strings.Replace(lines[2], "viewer view ", "viewer admin ", 1)
	os.WriteFile(path, []byte(lines[0]+"\n"+viewer+"\n"), 0o600)
	if err := ts.Tokens().Reload(); err != nil {
		t.Fatal(err)
	}
	logs := audit.String()
	for _, want := range []string{
		`msg="role changed" who=ci source=token from=edit to=none reason="token removed from the tokens file"`,
		`msg="role changed" who=viewer source=token from=view to=admin reason="tokens file reloaded"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the audit log lacks %s:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, "role changed"); n != 2 {
		t.Errorf("%d role changes audited, want 2:\n%s", n, logs)
	}
}

// TestSessionRoleChangeAudited: a session whose recheck gives another
// role is audited once, when the change is first seen.
func TestSessionRoleChangeAudited(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	ts, path, audit := lifecycleServer(t, clock)
	value, sess, err := ts.Sessions().Login("127.0.0.1:1", ts.tokens["viewer"])
	if err != nil || sess.Identity.Role != RoleView {
		t.Fatalf("login: %+v, %v", sess, err)
	}
	data, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(data), "viewer view ", "viewer edit ", 1)), 0o600)
	if err := ts.Tokens().Reload(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, ok := ts.Sessions().Check(value); !ok || got.Identity.Role != RoleEdit {
			t.Fatalf("session after the reload: %+v, %v", got, ok)
		}
	}
	logs := audit.String()
	want := `msg="role changed" who=viewer source=token from=view to=edit reason="session rechecked"`
	if n := strings.Count(logs, want); n != 1 {
		t.Errorf("the session's role change is audited %d times, want once:\n%s", n, logs)
	}
}
