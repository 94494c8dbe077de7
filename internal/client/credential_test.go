package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

// jwtOf is an unsigned JWT of the claims: ParseIDToken reads claims and
// checks no signature.
func jwtOf(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
}

func TestParseIDToken(t *testing.T) {
	c, err := client.ParseIDToken(jwtOf(`{"iss":"http://127.0.0.1:9","sub":"u1","aud":"rezusctl","exp":1796515200,"email":"a@example.com","nonce":"n"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Issuer != "http://127.0.0.1:9" || c.Name() != "a@example.com" || c.Nonce != "n" || !c.Expiry().Equal(time.Unix(1796515200, 0)) {
		t.Errorf("claims = %+v", c)
	}
	if c, _ := client.ParseIDToken(jwtOf(`{"sub":"u1","exp":1}`)); c.Name() != "u1" {
		t.Errorf("Name without an e-mail = %q, want the subject", c.Name())
	}
	for raw, want := range map[string]string{
		"opaque-token":              "the ID token is not a JWT",
		"a.!!!.c":                   "the ID token's payload is not base64url",
		jwtOf(`{"sub":"u1"}`):       "the ID token has no expiry (exp)",
		jwtOf(`{"exp":"tomorrow"}`): "the ID token's claims: ",
	} {
		if _, err := client.ParseIDToken(raw); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseIDToken(%q) = %v, want %q", raw, err, want)
		}
	}
}

// A client sends its credential's bearer on every request, and a login
// that expired and cannot be renewed stops the request before it is sent,
// with the message that says so and never the token.
func TestCredentialBearer(t *testing.T) {
	s := startServer(t, backend.Config{}, true)
	now := time.Now()
	for name, cred := range map[string]client.Credential{
		"static":            client.StaticToken(s.tokens["admin"]),
		"valid login":       client.NewRefreshing(client.Login{Source: client.LoginLocal, User: "admin", Token: s.tokens["admin"], Expiry: now.Add(time.Hour)}, nil, nil),
		"login ending soon": client.NewRefreshing(client.Login{Source: client.LoginLocal, User: "admin", Token: s.tokens["admin"], Expiry: now.Add(30 * time.Second)}, nil, nil),
	} {
		c, err := client.New(client.Options{Server: s.URL(), Credential: cred})
		if err != nil {
			t.Fatal(err)
		}
		who, err := c.Whoami(ctx(t))
		if err != nil || who.User != "admin" || who.Role != "admin" || who.Source != "token" {
			t.Errorf("%s: whoami = %+v, %v; want the admin token", name, who, err)
		}
		if _, err := c.Tenants(ctx(t), client.ListOptions{}); err != nil {
			t.Errorf("%s: list tenants: %v", name, err)
		}
	}

	expired := client.Login{Source: client.LoginLocal, User: "alice", Token: s.tokens["admin"], Expiry: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)}
	c, err := client.New(client.Options{Server: s.URL(), Credential: client.NewRefreshing(expired, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Tenants(ctx(t), client.ListOptions{})
	var ee *client.ExpiredError
	if !errors.As(err, &ee) || err.Error() != "the login of alice expired at 2026-12-05T10:00:00Z; log in again with rezusctl login --username alice" {
		t.Errorf("an expired local login: %v", err)
	}
	oidcLogin := client.Login{Source: client.LoginOIDC, User: "a@example.com", Token: s.tokens["admin"], Expiry: expired.Expiry}
	c, _ = client.New(client.Options{Server: s.URL(), Credential: client.NewRefreshing(oidcLogin, nil, nil)})
	if _, err := c.Tenants(ctx(t), client.ListOptions{}); err == nil || err.Error() != "the login of a@example.com expired at 2026-12-05T10:00:00Z; log in again with rezusctl login" {
		t.Errorf("an expired OIDC login without a refresh token: %v", err)
	}
}

// deviceLogin signs user in at p with the CLI's client through the device
// flow, the test approving the code, and returns the login it makes.
func deviceLogin(t testing.TB, p *oidctest.Provider, user, password string) client.Login {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prov, err := client.Discover(c, nil, p.Issuer)
	if err != nil {
		t.Fatal(err)
	}
	conf := &oauth2.Config{ClientID: p.CLIClientID, Scopes: []string{"openid", "email", "offline_access"},
		Endpoint: oauth2.Endpoint{TokenURL: prov.TokenEndpoint, DeviceAuthURL: prov.DeviceAuthorizationEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	da, err := conf.DeviceAuth(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApproveDevice(c, da.UserCode, user, password); err != nil {
		t.Fatal(err)
	}
	tok, err := conf.DeviceAccessToken(c, da)
	if err != nil {
		t.Fatal(err)
	}
	l, err := client.LoginFromToken(tok, client.Login{Issuer: p.Issuer, ClientID: p.CLIClientID, TokenURL: prov.TokenEndpoint, Scopes: conf.Scopes})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Callers that find the login expired at once renew it once: the
// provider rotates refresh tokens, so a second renewal with the same one
// would be refused. Each gets the new ID token, and save gets it once.
func TestRefreshingRenewsOnce(t *testing.T) {
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{{Username: "erin", Password: "erin-password", Email: "erin@example.com"}}})
	l := deviceLogin(t, p, "erin", "erin-password")
	if l.RefreshToken == "" || l.User != "erin@example.com" {
		t.Fatalf("device login %s, refresh token %t", l.User, l.RefreshToken != "")
	}
	l.Expiry = time.Now().Add(30 * time.Second) // within RefreshMargin
	var mu sync.Mutex
	var saved []client.Login
	r := client.NewRefreshing(l, func(n client.Login) error {
		mu.Lock()
		defer mu.Unlock()
		saved = append(saved, n)
		return nil
	}, nil)
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			tok, err := r.Bearer(ctx(t))
			if err != nil {
				t.Error(err)
			}
			got[i] = tok
		})
	}
	wg.Wait()
	if len(saved) != 1 {
		t.Fatalf("saved %d renewed logins, want 1", len(saved))
	}
	n := saved[0]
	if n.Token == l.Token || n.RefreshToken == l.RefreshToken || n.User != "erin@example.com" || n.TokenURL != l.TokenURL || time.Until(n.Expiry) < 50*time.Minute {
		t.Errorf("renewed login: user %s, new token %t, rotated refresh token %t, expiry %s", n.User, n.Token != l.Token, n.RefreshToken != l.RefreshToken, n.Expiry)
	}
	for i, tok := range got {
		if tok != n.Token {
			t.Errorf("caller %d got another token than the renewed one", i)
		}
	}
	if r.Login().Token != n.Token {
		t.Error("Login() is not the renewed login")
	}
	// The old refresh token was rotated away.
	old := l
	old.Expiry = time.Now().Add(-time.Second)
	if _, err := client.NewRefreshing(old, nil, nil).Bearer(ctx(t)); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Errorf("renewal with the rotated refresh token: %v", err)
	}
}

// BenchmarkRefreshingRenew measures a renewal of an expiring login at the
// real provider on loopback: the refresh grant and reading the new ID
// token.
func BenchmarkRefreshingRenew(b *testing.B) {
	p := oidctest.Start(b, oidctest.Options{Users: []oidctest.User{{Username: "erin", Password: "erin-password"}}})
	l := deviceLogin(b, p, "erin", "erin-password")
	for b.Loop() {
		l.Expiry = time.Now()
		r := client.NewRefreshing(l, nil, nil)
		if _, err := r.Bearer(context.Background()); err != nil {
			b.Fatal(err)
		}
		l = r.Login()
	}
}

// BenchmarkRefreshingFresh measures Bearer of a login with time left.
func BenchmarkRefreshingFresh(b *testing.B) {
	r := client.NewRefreshing(client.Login{Source: client.LoginOIDC, Token: "t", Expiry: time.Now().Add(time.Hour)}, nil, nil)
	for b.Loop() {
		if _, err := r.Bearer(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// Two processes hold the same login (a watch and a get, say). The first
// renews it and stores the renewal; the provider rotated the refresh
// token, so the second, which still holds the old one, takes the stored
// login instead of renewing it again, and renews with the stored refresh
// token once that login expires too.
func TestRefreshingTakesStoredRenewal(t *testing.T) {
	l, d := storedLogin(t)
	save, load := d.save, d.load
	first := client.NewRefreshing(l, save, nil).WithLoad(load)
	second := client.NewRefreshing(l, save, nil).WithLoad(load)

	tok1, err := first.Bearer(ctx(t))
	if err != nil || tok1 == l.Token || load1(load).Token != tok1 {
		t.Fatalf("first renewal: %v (renewed %t, stored %t)", err, tok1 != l.Token, load1(load).Token == tok1)
	}
	tok2, err := second.Bearer(ctx(t))
	if err != nil || tok2 != tok1 {
		t.Fatalf("second: %v, want the stored renewal's token (same %t)", err, tok2 == tok1)
	}

	// The stored login nears its end as well: the second renews it with
	// the stored (rotated) refresh token.
	d.mu.Lock()
	d.login.Expiry = time.Now().Add(10 * time.Second)
	d.mu.Unlock()
	third := client.NewRefreshing(l, save, nil).WithLoad(load)
	tok3, err := third.Bearer(ctx(t))
	if err != nil || tok3 == tok1 || load1(load).Token != tok3 {
		t.Errorf("renewal with the stored refresh token: %v (new %t, stored %t)", err, tok3 != tok1, load1(load).Token == tok3)
	}
}

// storedDisk is a login stored where several processes read it.
type storedDisk struct {
	mu    sync.Mutex
	login client.Login
}

func (d *storedDisk) save(l client.Login) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.login = l
	return nil
}

func (d *storedDisk) load() (client.Login, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.login, true
}

// storedLogin is erin's login at a real provider, 10 s from its expiry,
// and stored.
func storedLogin(t *testing.T) (client.Login, *storedDisk) {
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{{Username: "erin", Password: "erin-password", Email: "erin@example.com"}}})
	l := deviceLogin(t, p, "erin", "erin-password")
	l.Expiry = time.Now().Add(10 * time.Second)
	return l, &storedDisk{login: l}
}

func load1(load func() (client.Login, bool)) client.Login {
	l, _ := load()
	return l
}

// TestRefreshingRenewsOnceUnderLock: two processes' credentials of one
// stored login that both need a renewal at once, with the file lock:
// one renews, the other takes its renewal, so both send the same new
// token and neither spends a refresh token that the provider rotated.
func TestRefreshingRenewsOnceUnderLock(t *testing.T) {
	l, d := storedLogin(t)
	save, load := d.save, d.load
	lock := client.FileLock(filepath.Join(t.TempDir(), "config.lock"))
	creds := []*client.Refreshing{
		client.NewRefreshing(l, save, nil).WithLoad(load).WithLock(lock),
		client.NewRefreshing(l, save, nil).WithLoad(load).WithLock(lock),
	}
	toks, errs := make([]string, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range creds {
		wg.Go(func() { toks[i], errs[i] = c.Bearer(ctx(t)) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || toks[0] == l.Token || toks[0] != toks[1] || load1(load).Token != toks[0] {
		t.Fatalf("renewals at once: %v, %v (renewed %t, the same %t, stored %t)", errs[0], errs[1], toks[0] != l.Token, toks[0] == toks[1], load1(load).Token == toks[0])
	}
}
