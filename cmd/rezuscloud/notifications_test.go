package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// TestNotificationsSetting: --notifications is a flag, an environment
// variable and a config key, like every setting.
func TestNotificationsSetting(t *testing.T) {
	if f := serveSettings(t, nil); f.notifications != "" {
		t.Fatalf("--notifications defaults to %q, want none", f.notifications)
	}
	if f := serveSettings(t, nil, "--notifications", "/etc/rezuscloud/notifications.yaml"); f.notifications != "/etc/rezuscloud/notifications.yaml" {
		t.Fatalf("the flag gave %q", f.notifications)
	}
	if f := serveSettings(t, map[string]string{"REZUSCLOUD_NOTIFICATIONS": "/env.yaml"}); f.notifications != "/env.yaml" {
		t.Fatalf("REZUSCLOUD_NOTIFICATIONS gave %q", f.notifications)
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("notifications: /file.yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := serveSettings(t, nil, "--config", cfg); f.notifications != "/file.yaml" {
		t.Fatalf("the config key gave %q", f.notifications)
	}
}

// TestNotificationsOpen: a notifications config with a mistake stops the
// start with its file and line, and lets go of what was opened; a good
// one gives the API's test endpoint its providers.
func TestNotificationsOpen(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "notifications.yaml")
	if err := os.WriteFile(bad, []byte("providers:\n  - name: chat\n    type: telegraph\n    address: http://127.0.0.1:1/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := testServeFlags(t, servertest.Options{})
	g := *f
	g.notifications = bad
	m := NewMain(&g, slog.New(slog.DiscardHandler))
	err := m.Open()
	if err == nil {
		m.Close()
		t.Fatal("Open with an unknown provider type succeeded")
	}
	if !strings.Contains(err.Error(), "--notifications") || !strings.Contains(err.Error(), bad+":3") || !strings.Contains(err.Error(), "telegraph") {
		t.Fatalf("Open: %v; want --notifications, %s:3 and the type", err, bad)
	}

	var got atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	defer rcv.Close()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("providers: [{name: hook, type: webhook, address: \""+rcv.URL+"\"}]\nalerts: [{name: all, providers: [hook]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.notifications = good
	m = NewMain(&g, slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatalf("Open after a failed Open: %v", err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	resp, err := http.Post(m.Server.URL()+"/api/v1/notifications/hook/test", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || got.Load() != 1 {
		t.Fatalf("test message: %s, the receiver got %d", resp.Status, got.Load())
	}
}
