package client_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/client"
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
