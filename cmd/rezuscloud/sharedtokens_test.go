package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestReplicasShareTofuCredentials: the credential one replica hands to
// a tofu run is accepted by another replica of the store (tofu's state
// requests reach any replica through --state-url), under the name it was
// minted for and until it is revoked; a wrong secret is refused.
func TestReplicasShareTofuCredentials(t *testing.T) {
	c := etcdtest.Start(t, 1)
	file, _ := servertest.Tokens(t, map[string]string{"ops": "admin"})
	a, b := openReplicaMain(t, c, "a", "--tokens-file", file), openReplicaMain(t, c, "b", "--tokens-file", file)
	other := httptest.NewServer(b.Server.Handler())
	defer other.Close()
	get := func(user, secret string) int {
		t.Helper()
		req, err := http.NewRequest("GET", other.URL+"/api/v1/tenants", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(user, secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	secret, revoke := a.Server.Tokens().Ephemeral("tofu-staging", backend.RoleEdit)
	if code := get("tofu-staging", secret); code != http.StatusOK {
		t.Errorf("the other replica answers %d to a tofu run's credential, want 200", code)
	}
	if code := get("tofu-other", secret); code != http.StatusUnauthorized {
		t.Errorf("the credential under another name: %d, want 401", code)
	}
	if code := get("tofu-staging", secret+"x"); code != http.StatusUnauthorized {
		t.Errorf("a wrong secret: %d, want 401", code)
	}
	revoke()
	if code := get("tofu-staging", secret); code != http.StatusUnauthorized {
		t.Errorf("a revoked credential: %d, want 401", code)
	}
}

// TestReplicasShareLogins: a local user's login token made by one replica
// is accepted by another, with the user's role of the users file there;
// a logout through either replica ends it on both.
func TestReplicasShareLogins(t *testing.T) {
	c := etcdtest.Start(t, 1)
	users := anaUsersFile(t)
	open := func(name string) *httptest.Server {
		s := httptest.NewServer(openReplicaMain(t, c, name, "--users-file", users).Server.Handler())
		t.Cleanup(s.Close)
		return s
	}
	a, b := open("a"), open("b")
	login := func(s *httptest.Server) string {
		t.Helper()
		resp, err := http.Post(s.URL+backend.LoginPath, "application/json", strings.NewReader(`{"username":"ana","password":"ana's pass"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans struct{ Token string }
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusOK || ans.Token == "" {
			t.Fatalf("login: %d, %v", resp.StatusCode, err)
		}
		return ans.Token
	}
	call := func(s *httptest.Server, method, path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		name           string
		made, out, not *httptest.Server
	}{{"logout through the other replica", a, b, a}, {"logout through the replica that made it", a, a, b}} {
		token := login(tc.made)
		for _, s := range []*httptest.Server{a, b} {
			if code, body := call(s, "GET", backend.WhoamiPath, token); code != http.StatusOK || !strings.Contains(body, `"user":"ana"`) ||
				!strings.Contains(body, `"role":"edit"`) || !strings.Contains(body, `"source":"local"`) {
				t.Fatalf("%s: whoami on %s: %d %s", tc.name, s.URL, code, body)
			}
		}
		if code, body := call(tc.out, "POST", backend.LogoutPath, token); code != http.StatusNoContent {
			t.Fatalf("%s: logout: %d %s", tc.name, code, body)
		}
		for _, s := range []*httptest.Server{tc.out, tc.not} {
			if code, body := call(s, "GET", backend.WhoamiPath, token); code != http.StatusUnauthorized || !strings.Contains(body, "unknown login token") {
				t.Errorf("%s: the token after the logout on %s: %d %s, want 401", tc.name, s.URL, code, body)
			}
		}
	}
}

// openReplicaMain opens a server on the store in etcd c, as the replica
// name with a data dir of its own, a 3 s lease and args; it closes when
// the test ends.
func openReplicaMain(t *testing.T, c *etcdtest.Cluster, name string, args ...string) *Main {
	t.Helper()
	env := map[string]string{"REZUSCLOUD_STORE": "etcd", "REZUSCLOUD_ETCD_ENDPOINTS": strings.Join(c.Endpoints(), ",")}
	args = append([]string{"--data", filepath.Join(t.TempDir(), name), "--listen", "127.0.0.1:0",
		"--replica-name", name, "--lease-ttl", "3s"}, args...)
	m := NewMain(serveSettings(t, env, args...), slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// anaUsersFile writes a users file with the user ana, of role edit and
// password "ana's pass", and returns its path.
func anaUsersFile(t *testing.T) string {
	t.Helper()
	hash, err := backend.HashPassword("ana's pass", backend.HashArgon2id)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("ana edit "+hash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return users
}
