package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// oidcServer runs the server's Main with single sign-on at p until the
// test ends.
func oidcServer(t *testing.T, p *oidctest.Provider, extra ...string) *Main {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(p.WebClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--oidc-issuer", p.Issuer, "--oidc-client-id", p.WebClientID, "--oidc-client-secret-file", secret,
		"--oidc-cli-client-id", p.CLIClientID, "--oidc-role-map", "platform-admins=admin,platform=edit"}, extra...)
	m := NewMain(testServeFlags(t, servertest.Options{Args: args}), slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ran
		m.Close()
	})
	return m
}

func oidcGet(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// deviceToken signs user in with the CLI's client through the device
// flow and returns its ID token.
func deviceToken(t *testing.T, p *oidctest.Provider, user, password string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	op, err := oidc.NewProvider(ctx, p.Issuer)
	if err != nil {
		t.Fatal(err)
	}
	var disc struct {
		Device string `json:"device_authorization_endpoint"`
	}
	op.Claims(&disc)
	cfg := oauth2.Config{ClientID: p.CLIClientID, Endpoint: op.Endpoint(), Scopes: []string{"openid", "email", "groups"}}
	cfg.Endpoint.AuthStyle, cfg.Endpoint.DeviceAuthURL = oauth2.AuthStyleInParams, disc.Device
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApproveDevice(ctx, da.UserCode, user, password); err != nil {
		t.Fatal(err)
	}
	da.Interval = 1
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	return raw
}

func TestOIDCBearer(t *testing.T) {
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{
		{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"platform"}},
		{Username: "bob", Password: "pw-bob", Email: "bob@example.org", Groups: []string{"sales"}},
	}})
	m := oidcServer(t, p)
	base := m.Server.URL()

	code, body := oidcGet(t, base+AuthConfigPath, "")
	var cfg authConfig
	if err := json.Unmarshal([]byte(body), &cfg); code != http.StatusOK || err != nil || cfg.Issuer != p.Issuer ||
		cfg.CLIClientID != p.CLIClientID || !slices.Equal(cfg.Scopes, []string{"openid", "profile", "email", "groups"}) {
		t.Fatalf("%s: %d %s", AuthConfigPath, code, body)
	}
	// Single sign-on closes the server.
	if code, _ := oidcGet(t, base+"/api/v1/tenants", ""); code != http.StatusUnauthorized {
		t.Fatalf("without a credential: %d", code)
	}
	raw := deviceToken(t, p, "alice", "pw-alice")
	if code, body := oidcGet(t, base+"/api/v1/tenants", raw); code != http.StatusOK || !strings.Contains(body, `"items"`) {
		t.Fatalf("alice's ID token: %d %s", code, body)
	}
	// Edit, not admin: a copy of the store needs admin.
	if code, body := oidcGet(t, base+"/api/v1/admin/store", raw); code != http.StatusForbidden || !strings.Contains(body, "edit") {
		t.Fatalf("an editor's copy of the store: %d %s", code, body)
	}
	if code, body := oidcGet(t, base+"/api/v1/tenants", deviceToken(t, p, "bob", "pw-bob")); code != http.StatusUnauthorized || !strings.Contains(body, "none of your groups (sales)") {
		t.Fatalf("bob's ID token: %d %s", code, body)
	}
	expired, _ := p.Sign(map[string]any{"iss": p.Issuer, "aud": p.CLIClientID, "sub": "alice", "groups": []string{"platform"},
		"exp": time.Now().Add(-time.Minute).Unix(), "iat": time.Now().Add(-time.Hour).Unix()})
	if code, body := oidcGet(t, base+"/api/v1/tenants", expired); code != http.StatusUnauthorized || !strings.Contains(body, "the ID token expired at") {
		t.Fatalf("an expired ID token: %d %s", code, body)
	}
	if code, _ := oidcGet(t, base+"/api/v1/tenants", "not-a-token"); code != http.StatusUnauthorized {
		t.Fatalf("an unknown bearer: %d", code)
	}
	audit, err := os.ReadFile(filepath.Join(m.flags.data, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"credential refused","method":"oidc-bearer","reason":"expired"`, `"reason":"no-role"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit log lacks %s:\n%s", want, audit)
		}
	}
	if strings.Contains(string(audit), expired) || strings.Contains(string(audit), raw) {
		t.Error("the audit log holds a token")
	}
}

func TestOIDCFlags(t *testing.T) {
	p := oidctest.Start(t, oidctest.Options{})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--oidc-client-id", "x"}, "the --oidc-* flags need --oidc-issuer"},
		{[]string{"--oidc-issuer", p.Issuer, "--oidc-client-id", "x"}, "--oidc-issuer needs --oidc-client-id and --oidc-role-map"},
		{[]string{"--oidc-issuer", p.Issuer, "--oidc-client-id", "x", "--oidc-role-map", "platform=root"}, `role "root" is not one of view, edit, admin`},
		{[]string{"--oidc-issuer", p.Issuer, "--oidc-client-id", "x", "--oidc-role-map", "a=view", "--oidc-client-secret-file", "/nonexistent"}, "--oidc-client-secret-file"},
		{[]string{"--oidc-issuer", "http://127.0.0.1:1", "--oidc-client-id", "x", "--oidc-role-map", "a=view"}, "discover the OpenID provider http://127.0.0.1:1"},
	} {
		m := NewMain(testServeFlags(t, servertest.Options{Args: tc.args}), slog.New(slog.DiscardHandler))
		err := m.Open()
		m.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// Without single sign-on, the auth config says so.
	m := NewMain(testServeFlags(t, servertest.Options{}), slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec := &responseRecorder{header: http.Header{}}
	req, _ := http.NewRequest("GET", AuthConfigPath, nil)
	m.Server.Handler().ServeHTTP(rec, req)
	if rec.code != http.StatusNotFound || !strings.Contains(rec.body.String(), "no single sign-on") {
		t.Fatalf("auth config without SSO: %d %s", rec.code, rec.body.String())
	}
}

type responseRecorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *responseRecorder) Header() http.Header         { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *responseRecorder) WriteHeader(code int)        { r.code = code }
