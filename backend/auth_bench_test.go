package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/sso"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// BenchmarkLocalLogin measures a local login's time in the server: POST
// /api/v1/auth/login through the server's handler, from the JSON body to
// the minted bearer token, with each hash at the parameters of `rezuscloud
// user add`. The sessions' clock moves a minute per login, so that no
// limit holds.
func BenchmarkLocalLogin(b *testing.B) {
	for _, kind := range []string{HashArgon2id, HashBcrypt} {
		b.Run(kind, func(b *testing.B) {
			hash, err := HashPassword("bench password", kind)
			if err != nil {
				b.Fatal(err)
			}
			clock := &testClock{now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)}
			srv, err := NewServer(Config{DataDir: filepath.Join(b.TempDir(), "data"), SessionClock: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			users, err := LoadUsers(writeUsers(b, "", "ana edit "+hash+"\n"))
			if err != nil {
				b.Fatal(err)
			}
			srv.SetAudit(slog.New(slog.DiscardHandler))
			srv.ServeUsers(users)
			h := srv.Handler()
			body := loginBody("ana", "bench password", false)
			for b.Loop() {
				clock.Add(time.Minute)
				req := httptest.NewRequest("POST", LoginPath, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.RemoteAddr = "127.0.0.1:1"
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("login: %d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkAuthOverhead measures GET /api/v1/tenants (ten tenants) over
// real HTTP on loopback from 200 concurrent clients, with each kind of
// credential: a token of the tokens file (bearer and basic auth, today's
// check), a dashboard session of a token and of a local user (with the
// user's recheck), a local login's bearer token, and an OIDC ID token of a
// real provider as the bearer (its keys cached, as after the first
// request), mixed in one load.
// It reports the p50 and p99 latency of each kind's requests; b.N
// requests of each kind.
func BenchmarkAuthOverhead(b *testing.B) {
	const clients = 200
	clock := &testClock{now: time.Now()}
	cfg := Config{DataDir: filepath.Join(b.TempDir(), "data"), Listen: "127.0.0.1:0", SessionClock: clock.Now,
		Logger: slog.New(slog.DiscardHandler)}
	var toks testTokens
	cfg.TokensFile, toks = writeTokensFile(b)
	srv, err := NewServer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	err = srv.Store().Update(func(tx store.Tx) error {
		for i := range 10 {
			name := fmt.Sprintf("t%d", i)
			if err := benchPut(tx, schema.KindTenant, name, storetest.Tenant(name, "prod", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	users, err := LoadUsers(writeUsers(b, "", "ana edit "+cheapArgon2id("pw")+"\n"))
	if err != nil {
		b.Fatal(err)
	}
	srv.SetAudit(slog.New(slog.DiscardHandler))
	srv.ServeUsers(users)
	tokenSession, _, err := srv.Sessions().Login("127.0.0.1:1", toks["viewer"])
	if err != nil {
		b.Fatal(err)
	}
	userSession, _, err := srv.UserSession("127.0.0.1:1", "ana", "pw", "bench")
	if err != nil {
		b.Fatal(err)
	}
	e, _ := users.verify("ana", "pw")
	loginTok, _ := srv.mintLoginToken(e)
	idToken := oidcBearer(b, srv)

	kinds := []struct {
		name string
		set  func(*http.Request)
	}{
		{"token-bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+toks["viewer"]) }},
		{"token-basic", func(r *http.Request) { r.SetBasicAuth("viewer", toks["viewer"]) }},
		{"session-token", func(r *http.Request) { r.Header.Set("Cookie", SessionCookie+"="+tokenSession) }},
		{"session-local", func(r *http.Request) { r.Header.Set("Cookie", SessionCookie+"="+userSession) }},
		{"login-bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+loginTok) }},
		{"oidc-bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+idToken) }},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	get := func(kind int) time.Duration {
		req, _ := http.NewRequest("GET", srv.URL()+"/api/v1/tenants", nil)
		kinds[kind].set(req)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != 200 {
			b.Errorf("tenants as %s: %d", kinds[kind].name, resp.StatusCode)
		}
		return took
	}
	// The clients run all kinds mixed, request i with kind i mod 6, so
	// that each kind meets the same load; a first round warms the
	// connections and the heap.
	run := func(n int) []time.Duration {
		lat := make([]time.Duration, n)
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for i := range next {
					lat[i] = get(i % len(kinds))
				}
			})
		}
		wg.Wait()
		return lat
	}
	run(10 * clients)
	n := max(b.N, clients) * len(kinds)
	b.ResetTimer()
	lat := run(n)
	b.StopTimer()
	for k, kind := range kinds {
		var mine []time.Duration
		for i := k; i < n; i += len(kinds) {
			mine = append(mine, lat[i])
		}
		slices.Sort(mine)
		b.ReportMetric(float64(mine[len(mine)/2].Microseconds()), kind.name+"-p50-µs")
		b.ReportMetric(float64(mine[len(mine)*99/100].Microseconds()), kind.name+"-p99-µs")
	}
}

// oidcBearer makes srv accept the ID tokens of a real OpenID provider as
// bearer credentials, as `rezuscloud serve --oidc-*` does, and returns one
// of a person of group platform (view).
func oidcBearer(b *testing.B, srv *Server) string {
	p := oidctest.Start(b, oidctest.Options{})
	roles, err := sso.ParseRoleMap("platform=view")
	if err != nil {
		b.Fatal(err)
	}
	c, err := sso.New(b.Context(), sso.Config{Issuer: p.Issuer, ClientID: p.WebClientID, ClientSecret: p.WebClientSecret, Roles: roles})
	if err != nil {
		b.Fatal(err)
	}
	srv.Tokens().AddCheck(func(name, secret string) (Identity, error) {
		l, err := c.VerifyBearer(context.Background(), secret)
		if errors.Is(err, sso.ErrNotMine) {
			return Identity{}, ErrNotMine
		}
		if err != nil {
			return Identity{}, err
		}
		role, err := ParseRole(l.Role)
		return Identity{Name: l.Subject, Role: role, Source: SourceOIDC, Subject: l.Subject, Expires: l.Expires}, err
	})
	now := time.Now()
	raw, err := p.Sign(map[string]any{"iss": p.Issuer, "aud": p.WebClientID, "sub": "alice", "groups": []string{"platform"},
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

// BenchmarkCredentialCheck measures the check of each kind of credential
// alone, without HTTP: a token of the tokens file (four tokens), a
// dashboard session of a token and of a local user, a local login's
// bearer token and an OIDC ID token (its verification cached), for which
// the tokens are tried first.
func BenchmarkCredentialCheck(b *testing.B) {
	clock := &testClock{now: time.Now()}
	var toks testTokens
	var cfg Config
	cfg.TokensFile, toks = writeTokensFile(b)
	cfg.DataDir, cfg.SessionClock = filepath.Join(b.TempDir(), "data"), clock.Now
	srv, err := NewServer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	users, err := LoadUsers(writeUsers(b, "", "ana edit "+cheapArgon2id("pw")+"\n"))
	if err != nil {
		b.Fatal(err)
	}
	srv.SetAudit(slog.New(slog.DiscardHandler))
	srv.ServeUsers(users)
	tokenSession, _, _ := srv.Sessions().Login("127.0.0.1:1", toks["viewer"])
	userSession, _, _ := srv.UserSession("127.0.0.1:1", "ana", "pw", "bench")
	e, _ := users.verify("ana", "pw")
	loginTok, _ := srv.mintLoginToken(e)
	idToken := oidcBearer(b, srv)
	for _, c := range []struct {
		name  string
		check func() bool
	}{
		{"token", func() bool { _, err := srv.tokens.check("", toks["viewer"]); return err == nil }},
		{"session-token", func() bool { _, ok := srv.sessions.Check(tokenSession); return ok }},
		{"session-local", func() bool { _, ok := srv.sessions.Check(userSession); return ok }},
		{"login-bearer", func() bool { _, err := srv.tokens.check("", loginTok); return err == nil }},
		{"oidc-bearer", func() bool { _, err := srv.tokens.check("", idToken); return err == nil }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if !c.check() {
					b.Fatal("refused")
				}
			}
		})
	}
}
