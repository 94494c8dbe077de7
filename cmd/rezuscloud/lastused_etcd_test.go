package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestReplicasShareLastUsed: the last use of a token that one replica of
// an etcd store saw is what another replica lists, once the first has
// written it (at the latest when it closes).
func TestReplicasShareLastUsed(t *testing.T) {
	c := etcdtest.Start(t, 1)
	file, tokens := servertest.Tokens(t, map[string]string{"ops": "admin", "ci": "edit"})
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
	call := func(m *Main, token, path string) []byte {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		m.Server.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	lastUsed := func() *time.Time {
		var l api.List[api.TokenInfo]
		if err := json.Unmarshal(call(b, tokens["ops"], "/api/v1/tokens"), &l); err != nil {
			t.Fatal(err)
		}
		for _, ti := range l.Items {
			if ti.Name == "ci" {
				return ti.LastUsed
			}
		}
		t.Fatal("ci is not in the list")
		return nil
	}
	if got := lastUsed(); got != nil {
		t.Fatalf("ci has a last use before any: %v", got)
	}
	before := time.Now()
	call(a, tokens["ci"], "/api/v1/tenants")
	a.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := lastUsed()
		if got != nil {
			if got.Before(before) || got.After(time.Now()) {
				t.Errorf("replica b lists ci's last use at %v, want the use on replica a at %v", got, before)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("replica b never lists the last use that replica a wrote")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
