package sso

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

const redirect = "http://127.0.0.1:1/login/sso/callback"

var (
	alice = oidctest.User{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"platform", "dev"}}
	bob   = oidctest.User{Username: "bob", Password: "pw-bob", Email: "bob@example.org", Groups: []string{"sales"}}
)

func start(t *testing.T) (*oidctest.Provider, *Client) {
	t.Helper()
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{alice, bob}, RedirectURIs: []string{redirect}})
	roles, err := ParseRoleMap("platform-admins=admin,platform=edit")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(t.Context(), Config{Issuer: p.Issuer, ClientID: p.WebClientID, ClientSecret: p.WebClientSecret,
		CLIClientID: p.CLIClientID, Scopes: append(slices.Clone(DefaultScopes), "offline_access"), Roles: roles})
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

// signIn runs the code flow for user through the provider's login form.
func signIn(t *testing.T, p *oidctest.Provider, c *Client, user oidctest.User) (*Login, error) {
	t.Helper()
	authURL, cookie := c.Begin(redirect, "/tenants/a")
	back, err := p.Login(t.Context(), authURL, user.Username, user.Password)
	if err != nil {
		t.Fatal(err)
	}
	return c.Finish(t.Context(), cookie, back.Query())
}

func TestSignIn(t *testing.T) {
	p, c := start(t)
	l, err := signIn(t, p, c, alice)
	if err != nil {
		t.Fatal(err)
	}
	if l.Subject != "alice" || l.Email != "alice@example.org" || l.Role != "edit" || l.Next != "/tenants/a" ||
		!slices.Equal(l.Groups, alice.Groups) || time.Until(l.Expires) < 50*time.Minute {
		t.Fatalf("login %+v", l)
	}
	if l.refresh == nil || l.refresh.RefreshToken == "" {
		t.Fatal("no refresh token kept")
	}
	end := c.EndSessionURL(l, "http://127.0.0.1:1/login")
	u, err := url.Parse(end)
	if err != nil || !strings.HasPrefix(end, p.Issuer+"/") || u.Query().Get("id_token_hint") != l.idToken ||
		u.Query().Get("post_logout_redirect_uri") != "http://127.0.0.1:1/login" {
		t.Fatalf("end-session URL %q", end)
	}
}

func TestSignInWithoutRole(t *testing.T) {
	p, c := start(t)
	l, err := signIn(t, p, c, bob)
	var nr *NoRoleError
	if !errors.As(err, &nr) || !slices.Equal(nr.Groups, []string{"sales"}) || !strings.Contains(err.Error(), "sales") {
		t.Fatalf("bob got %+v, %v", l, err)
	}
	// A default gives everyone a role.
	c.cfg.Roles, _ = ParseRoleMap("platform=edit,*=view")
	if l, err = signIn(t, p, c, bob); err != nil || l.Role != "view" {
		t.Fatalf("with a default, bob got %+v, %v", l, err)
	}
}

func TestFinishRefusesAnotherFlow(t *testing.T) {
	p, c := start(t)
	authURL, _ := c.Begin(redirect, "/")
	_, other := c.Begin(redirect, "/")
	back, err := p.Login(t.Context(), authURL, "alice", "pw-alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(t.Context(), other, back.Query()); Reason(err) != "state" {
		t.Fatalf("another flow's cookie: %v", err)
	}
	if _, err := c.Finish(t.Context(), "garbage", back.Query()); Reason(err) != "flow" {
		t.Fatalf("a forged cookie: %v", err)
	}
	// A cookie of another client (process) does not open.
	_, c2 := start(t)
	_, foreign := c2.Begin(redirect, "/")
	if _, err := c.Finish(t.Context(), foreign, back.Query()); Reason(err) != "flow" {
		t.Fatalf("another process's cookie: %v", err)
	}
	q := url.Values{"error": {"access_denied"}, "error_description": {"no"}}
	if _, err := c.Finish(t.Context(), other, q); Reason(err) != "refused" || !strings.Contains(err.Error(), "access_denied") {
		t.Fatalf("the provider's refusal: %v", err)
	}
}

func TestForgedIDTokensRefused(t *testing.T) {
	p, c := start(t)
	now := time.Now()
	good := func() map[string]any {
		return map[string]any{"iss": p.Issuer, "aud": p.WebClientID, "sub": "alice", "email": "alice@example.org",
			"groups": []string{"platform"}, "nonce": "n1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	}
	sign := func(claims map[string]any) string {
		raw, err := p.Sign(claims)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	if l, err := c.verify(t.Context(), c.web, sign(good()), "n1"); err != nil || l.Role != "edit" {
		t.Fatalf("the provider's own token: %+v, %v", l, err)
	}
	own, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged, err := oidctest.SignWith(own, p.KeyID(), good())
	if err != nil {
		t.Fatal(err)
	}
	with := func(k string, v any) map[string]any { c := good(); c[k] = v; return c }
	for _, tc := range []struct {
		name, raw, nonce, reason string
	}{
		{"wrong signature", forged, "n1", "signature"},
		{"wrong audience", sign(with("aud", "someone-else")), "n1", "audience"},
		{"wrong issuer", sign(with("iss", "http://127.0.0.1:9/other")), "n1", "issuer"},
		{"wrong nonce", sign(good()), "n2", "nonce"},
		{"expired", sign(with("exp", now.Add(-time.Minute).Unix())), "n1", "expired"},
		{"not a JWT", "abc.def", "n1", "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.verify(t.Context(), c.web, tc.raw, tc.nonce)
			if err == nil || Reason(err) != tc.reason {
				t.Fatalf("got %+v, %v (reason %s), want reason %s", l, err, Reason(err), tc.reason)
			}
		})
	}
}

func TestVerifyBearer(t *testing.T) {
	p, c := start(t)
	now := time.Now()
	claims := func(aud string, exp time.Time) map[string]any {
		return map[string]any{"iss": p.Issuer, "aud": aud, "sub": "alice", "groups": []string{"platform-admins"},
			"iat": now.Unix(), "exp": exp.Unix()}
	}
	for _, aud := range []string{p.WebClientID, p.CLIClientID} {
		raw, _ := p.Sign(claims(aud, now.Add(time.Hour)))
		if l, err := c.VerifyBearer(t.Context(), raw); err != nil || l.Role != "admin" || l.Subject != "alice" {
			t.Fatalf("audience %s: %+v, %v", aud, l, err)
		}
	}
	other, _ := p.Sign(map[string]any{"iss": "http://127.0.0.1:9", "aud": p.WebClientID, "sub": "x", "exp": now.Add(time.Hour).Unix()})
	for _, raw := range []string{"rzc_0123456789abcdef", "a.b.c", other} {
		if _, err := c.VerifyBearer(t.Context(), raw); !errors.Is(err, ErrNotMine) {
			t.Fatalf("%.20s: %v, want ErrNotMine", raw, err)
		}
	}
	expired, _ := p.Sign(claims(p.CLIClientID, now.Add(-time.Minute)))
	if _, err := c.VerifyBearer(t.Context(), expired); Reason(err) != "expired" || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("expired: %v", err)
	}
	elsewhere, _ := p.Sign(claims("another-client", now.Add(time.Hour)))
	if _, err := c.VerifyBearer(t.Context(), elsewhere); Reason(err) != "audience" {
		t.Fatalf("another audience: %v", err)
	}
	own, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged, _ := oidctest.SignWith(own, p.KeyID(), claims(p.CLIClientID, now.Add(time.Hour)))
	if _, err := c.VerifyBearer(t.Context(), forged); Reason(err) != "signature" {
		t.Fatalf("forged: %v", err)
	}

	// A rotated key is fetched again: its tokens verify.
	if err := p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	rotated, _ := p.Sign(claims(p.CLIClientID, now.Add(time.Hour)))
	if _, err := c.VerifyBearer(t.Context(), rotated); err != nil {
		t.Fatalf("a token of the rotated key: %v", err)
	}
}

func TestSessionRefreshRechecksRole(t *testing.T) {
	p, c := start(t)
	l, err := signIn(t, p, c, alice)
	if err != nil {
		t.Fatal(err)
	}
	s := c.NewSession(l)
	ctx := context.Background()
	if got, err := s.Check(ctx, time.Now(), time.Minute); err != nil || got != l {
		t.Fatalf("before expiry: %+v, %v", got, err)
	}
	later := l.Expires.Add(time.Second)
	p.AddUser(oidctest.User{Username: "alice", Password: "pw-alice", Email: "alice@example.org", Groups: []string{"platform-admins"}})
	got, err := s.Check(ctx, later, time.Minute)
	if err != nil || got.Role != "admin" || got.Subject != "alice" {
		t.Fatalf("after a refresh with new groups: %+v, %v", got, err)
	}
	// Groups that give no role end it.
	p.AddUser(oidctest.User{Username: "alice", Password: "pw-alice", Groups: []string{"sales"}})
	var nr *NoRoleError
	if _, err := s.Check(ctx, got.Expires.Add(time.Second), time.Minute); !errors.As(err, &nr) {
		t.Fatalf("after the groups left: %v", err)
	}
	// Without a refresh token, an expired ID token ends it.
	s2 := c.NewSession(&Login{Subject: "alice", Role: "edit", Expires: time.Now()})
	if _, err := s2.Check(ctx, time.Now().Add(time.Second), time.Minute); Reason(err) != "expired" {
		t.Fatalf("no refresh token: %v", err)
	}
}

func TestRoleMap(t *testing.T) {
	m, err := ParseRoleMap("platform-admins=admin, platform=edit,*=view")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		groups []string
		role   string
	}{
		{[]string{"platform"}, "edit"},
		{[]string{"platform", "platform-admins"}, "admin"},
		{[]string{"platform-admins", "platform"}, "admin"},
		{[]string{"sales"}, "view"},
		{nil, "view"},
	} {
		if r, ok := m.Role(tc.groups); !ok || r != tc.role {
			t.Errorf("%v: %q %v, want %q", tc.groups, r, ok, tc.role)
		}
	}
	strict, _ := ParseRoleMap("platform=edit")
	if r, ok := strict.Role([]string{"sales"}); ok {
		t.Errorf("without a default, sales got %q", r)
	}
	if got := m.String(); got != "platform-admins=admin,platform=edit,*=view" {
		t.Errorf("String() = %q", got)
	}
	for in, want := range map[string]string{
		"platform=root":       `role "root" is not one of view, edit, admin`,
		"platform":            "want GROUP=ROLE",
		"=edit":               "want GROUP=ROLE",
		"a=edit,a=view":       `group "a" is mapped twice`,
		"*=view,*=edit":       `group "*" is mapped twice`,
		" , ":                 "maps no group",
		"@/nonexistent/roles": "no such file",
	} {
		if _, err := ParseRoleMap(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	file := t.TempDir() + "/roles"
	writeFile(t, file, "# the platform team\nplatform-admins=admin\nplatform=edit\nbad\n")
	if _, err := ParseRoleMap("@" + file); err == nil || !strings.Contains(err.Error(), file+":4") {
		t.Errorf("a file's bad line: %v", err)
	}
}

// BenchmarkVerifyBearer measures the check of an ID token sent as an API
// bearer credential, with the keys cached.
func BenchmarkVerifyBearer(b *testing.B) {
	p := oidctest.Start(b, oidctest.Options{})
	roles, _ := ParseRoleMap("platform=edit")
	c, err := New(b.Context(), Config{Issuer: p.Issuer, ClientID: p.WebClientID, CLIClientID: p.CLIClientID, Roles: roles})
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := p.Sign(map[string]any{"iss": p.Issuer, "aud": p.CLIClientID, "sub": "alice", "groups": []string{"platform"},
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()})
	if _, err := c.VerifyBearer(b.Context(), raw); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.VerifyBearer(b.Context(), raw); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBearerCacheEndsAtExpiry: a remembered ID token is refused once it
// expires.
func TestBearerCacheEndsAtExpiry(t *testing.T) {
	p := oidctest.Start(t, oidctest.Options{})
	roles, _ := ParseRoleMap("platform=edit")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	c, err := New(t.Context(), Config{Issuer: p.Issuer, ClientID: p.WebClientID, Roles: roles, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := p.Sign(map[string]any{"iss": p.Issuer, "aud": p.WebClientID, "sub": "alice", "groups": []string{"platform"},
		"exp": now.Add(time.Minute).Unix(), "iat": now.Unix()})
	for range 2 {
		if l, err := c.VerifyBearer(t.Context(), raw); err != nil || l.Role != "edit" {
			t.Fatalf("%+v, %v", l, err)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if _, err := c.VerifyBearer(t.Context(), raw); Reason(err) != "expired" {
		t.Fatalf("after expiry: %v", err)
	}
}
