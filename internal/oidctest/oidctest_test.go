package oidctest_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/rezuscloud/rezuscloud/internal/oidctest"
)

const redirect = "http://127.0.0.1:1/callback"

var alice = oidctest.User{Username: "alice", Password: "wonderland", Email: "alice@example.org", Groups: []string{"platform", "dev"}}

type claims struct {
	Subject string   `json:"sub"`
	Email   string   `json:"email"`
	Groups  []string `json:"groups"`
	Nonce   string   `json:"nonce"`
}

func setup(t *testing.T) (*oidctest.Provider, *oidc.Provider, oauth2.Config) {
	t.Helper()
	p := oidctest.Start(t, oidctest.Options{Users: []oidctest.User{alice}, RedirectURIs: []string{redirect}})
	op, err := oidc.NewProvider(t.Context(), p.Issuer)
	if err != nil {
		t.Fatal(err)
	}
	return p, op, oauth2.Config{ClientID: p.WebClientID, ClientSecret: p.WebClientSecret, RedirectURL: redirect,
		Endpoint: op.Endpoint(), Scopes: []string{oidc.ScopeOpenID, "email", "groups", oidc.ScopeOfflineAccess}}
}

// codeFlow signs user in through the authorization code flow with PKCE
// and returns the verified ID token's claims and the token.
func codeFlow(t *testing.T, p *oidctest.Provider, op *oidc.Provider, cfg oauth2.Config, user, password string) (claims, *oauth2.Token) {
	t.Helper()
	ctx := t.Context()
	verifier := oauth2.GenerateVerifier()
	to, err := p.Login(ctx, cfg.AuthCodeURL("the-state", oidc.Nonce("the-nonce"), oauth2.S256ChallengeOption(verifier)), user, password)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(to.String(), redirect+"?") || to.Query().Get("state") != "the-state" || to.Query().Get("code") == "" {
		t.Fatalf("the login came back to %s, not the redirect URI with code and state", to)
	}
	tok, err := cfg.Exchange(ctx, to.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := op.Verifier(&oidc.Config{ClientID: cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	if err := idt.Claims(&c); err != nil {
		t.Fatal(err)
	}
	return c, tok
}

func TestCodeFlowCarriesGroups(t *testing.T) {
	p, op, cfg := setup(t)
	c, tok := codeFlow(t, p, op, cfg, "alice", "wonderland")
	want := claims{Subject: "alice", Email: "alice@example.org", Groups: []string{"platform", "dev"}, Nonce: "the-nonce"}
	if !slices.Equal(c.Groups, want.Groups) || c.Subject != want.Subject || c.Email != want.Email || c.Nonce != want.Nonce {
		t.Fatalf("ID token claims %+v, want %+v", c, want)
	}
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token with offline_access")
	}

	// A refresh after the groups changed carries the new groups.
	p.AddUser(oidctest.User{Username: "alice", Password: "wonderland", Email: "alice@example.org", Groups: []string{"viewers"}})
	fresh, err := cfg.TokenSource(t.Context(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := fresh.Extra("id_token").(string)
	idt, err := op.Verifier(&oidc.Config{ClientID: cfg.ClientID}).Verify(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	var after claims
	idt.Claims(&after)
	if !slices.Equal(after.Groups, []string{"viewers"}) {
		t.Fatalf("refreshed groups %v, want [viewers]", after.Groups)
	}

	// The userinfo endpoint carries them too.
	info, err := op.UserInfo(t.Context(), oauth2.StaticTokenSource(fresh))
	if err != nil {
		t.Fatal(err)
	}
	var ic claims
	info.Claims(&ic)
	if !slices.Equal(ic.Groups, []string{"viewers"}) || info.Email != "alice@example.org" {
		t.Fatalf("userinfo %+v groups %v", info, ic.Groups)
	}
}

func TestWrongPasswordRefused(t *testing.T) {
	p, _, cfg := setup(t)
	_, err := p.Login(t.Context(), cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())), "alice", "guess")
	if err == nil || !strings.Contains(err.Error(), "username or password wrong") {
		t.Fatalf("a wrong password gave %v", err)
	}
}

func TestUnregisteredRedirectRefused(t *testing.T) {
	p, _, cfg := setup(t)
	cfg.RedirectURL = "http://127.0.0.1:2/elsewhere"
	if _, err := p.Login(t.Context(), cfg.AuthCodeURL("s"), "alice", "wonderland"); err == nil {
		t.Fatal("an unregistered redirect URI was accepted")
	}
	p.AddRedirectURI(cfg.RedirectURL)
	if _, err := p.Login(t.Context(), cfg.AuthCodeURL("s"), "alice", "wonderland"); err != nil {
		t.Fatalf("after AddRedirectURI: %v", err)
	}
}

func TestDeviceFlow(t *testing.T) {
	p, op, _ := setup(t)
	cfg := oauth2.Config{ClientID: p.CLIClientID, Endpoint: op.Endpoint(), Scopes: []string{"openid", "email", "groups", "offline_access"}}
	cfg.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	var disc struct {
		Device string `json:"device_authorization_endpoint"`
	}
	op.Claims(&disc)
	cfg.Endpoint.DeviceAuthURL = disc.Device
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ApproveDevice(ctx, da.UserCode, "alice", "wonderland"); err != nil {
		t.Fatal(err)
	}
	da.Interval = 1
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := op.Verifier(&oidc.Config{ClientID: p.CLIClientID}).Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	idt.Claims(&c)
	if c.Subject != "alice" || !slices.Equal(c.Groups, alice.Groups) || tok.RefreshToken == "" {
		t.Fatalf("device flow gave %+v, refresh %q", c, tok.RefreshToken)
	}
	if err := p.ApproveDevice(ctx, "WRONG-CODE", "alice", "wonderland"); err == nil {
		t.Fatal("an unknown user code was approved")
	}
}

func TestRotateKeyAndSign(t *testing.T) {
	p, op, cfg := setup(t)
	before := p.KeyID()
	codeFlow(t, p, op, cfg, "alice", "wonderland") // caches the first key
	if err := p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	if p.KeyID() == before {
		t.Fatal("the key id did not change")
	}
	// A token of the new key verifies: the remote key set fetches again.
	c, _ := codeFlow(t, p, op, cfg, "alice", "wonderland")
	if c.Subject != "alice" {
		t.Fatalf("after rotation: %+v", c)
	}

	v := op.Verifier(&oidc.Config{ClientID: cfg.ClientID})
	claims := map[string]any{"iss": p.Issuer, "aud": cfg.ClientID, "sub": "bob", "exp": time.Now().Add(time.Minute).Unix(), "iat": time.Now().Unix()}
	signed, err := p.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), signed); err != nil {
		t.Fatalf("a token of the provider's key: %v", err)
	}
	own, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged, err := oidctest.SignWith(own, p.KeyID(), claims)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(t.Context(), forged); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a token of another key under the provider's key id: %v", err)
	}
}
