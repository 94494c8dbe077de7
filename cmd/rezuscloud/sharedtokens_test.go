package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	open := func(name string) *Main {
		env := map[string]string{"REZUSCLOUD_STORE": "etcd", "REZUSCLOUD_ETCD_ENDPOINTS": strings.Join(c.Endpoints(), ",")}
		m := NewMain(serveSettings(t, env, "--data", filepath.Join(t.TempDir(), name), "--listen", "127.0.0.1:0",
			"--tokens-file", file, "--replica-name", name, "--lease-ttl", "3s"), slog.New(slog.DiscardHandler))
		if err := m.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	a, b := open("a"), open("b")
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
