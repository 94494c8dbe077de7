package sso

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// DefaultScopes are the scopes asked for unless Config.Scopes says
// otherwise.
var DefaultScopes = []string{oidc.ScopeOpenID, "profile", "email", "groups"}

// DefaultGroupsClaim is the claim that holds the groups unless
// Config.GroupsClaim says otherwise.
const DefaultGroupsClaim = "groups"

// FlowTTL bounds how long a sign-in may take at the provider: the flow
// cookie lasts that long.
const FlowTTL = 10 * time.Minute

// Config says which provider and which clients to use.
type Config struct {
	// Issuer is the provider's issuer URL, whose
	// /.well-known/openid-configuration New reads.
	Issuer string
	// ClientID and ClientSecret are the dashboard's (a confidential
	// client of the code flow).
	ClientID     string
	ClientSecret string
	// CLIClientID is the public client of rezusctl, whose ID tokens are
	// also accepted as bearer credentials; empty for none.
	CLIClientID string
	// Scopes are the scopes asked for; default DefaultScopes. Add
	// offline_access where the provider needs it for refresh tokens.
	Scopes []string
	// GroupsClaim is the ID token's claim that lists the groups; default
	// DefaultGroupsClaim.
	GroupsClaim string
	// Roles maps groups to roles.
	Roles RoleMap
	// HTTPClient makes the requests to the provider; default
	// http.DefaultClient with a 30 s timeout.
	HTTPClient *http.Client
	// Now is the clock of expiries; default time.Now.
	Now func() time.Time
}

// Client is a relying party of one provider. It is safe for concurrent
// use.
type Client struct {
	cfg        Config
	provider   *oidc.Provider
	oauth      oauth2.Config // without RedirectURL, which each flow sets
	web        *oidc.IDTokenVerifier
	bearer     *oidc.IDTokenVerifier
	endSession string
	aead       cipher.AEAD
	bearers    bearerCache
}

// New discovers the provider and returns a client of it.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("single sign-on needs an issuer and a client id")
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = DefaultScopes
	}
	if !slices.Contains(cfg.Scopes, oidc.ScopeOpenID) {
		cfg.Scopes = append([]string{oidc.ScopeOpenID}, cfg.Scopes...)
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx = oidc.ClientContext(ctx, cfg.HTTPClient)
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the OpenID provider %s: %w", cfg.Issuer, err)
	}
	var extra struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err := p.Claims(&extra); err != nil {
		return nil, fmt.Errorf("discover the OpenID provider %s: %w", cfg.Issuer, err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	keysCtx := oidc.ClientContext(context.Background(), cfg.HTTPClient)
	c := &Client{cfg: cfg, provider: p, endSession: extra.EndSession, aead: aead,
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: p.Endpoint(), Scopes: cfg.Scopes},
		web:   p.VerifierContext(keysCtx, &oidc.Config{ClientID: cfg.ClientID, Now: cfg.Now}),
		// The bearer verifier checks the audience itself: the web or
		// the CLI client.
		bearer: p.VerifierContext(keysCtx, &oidc.Config{SkipClientIDCheck: true, Now: cfg.Now}),
	}
	return c, nil
}

// Issuer is the provider's issuer URL.
func (c *Client) Issuer() string { return c.cfg.Issuer }

// CLIClientID is the client id rezusctl signs in with.
func (c *Client) CLIClientID() string { return c.cfg.CLIClientID }

// Scopes are the scopes a sign-in asks for.
func (c *Client) Scopes() []string { return slices.Clone(c.cfg.Scopes) }

// Roles is the client's role map.
func (c *Client) Roles() RoleMap { return c.cfg.Roles }

// flow is what the flow cookie carries from Begin to Finish.
type flow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Redirect string `json:"r"`
	Next     string `json:"x"`
	Expires  int64  `json:"e"`
}

// Begin starts a sign-in whose provider returns to redirectURL, and whose
// person goes to next afterwards. It returns the provider's authorization
// URL and the value of the flow cookie, which Finish needs back.
func (c *Client) Begin(redirectURL, next string) (authURL, cookie string) {
	f := flow{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier(), Redirect: redirectURL,
		Next: next, Expires: c.cfg.Now().Add(FlowTTL).Unix()}
	o := c.oauth
	o.RedirectURL = redirectURL
	authURL = o.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
	b, _ := json.Marshal(f)
	nonce := make([]byte, c.aead.NonceSize())
	rand.Read(nonce)
	return authURL, base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, b, nil))
}

// Login is a person the provider signed in.
type Login struct {
	Subject string
	Email   string
	Groups  []string
	// Role is the role of the groups; empty with ErrNoRole.
	Role string
	// Expires is when the ID token expires.
	Expires time.Time
	// Next is where the person goes now (Begin's next).
	Next string

	// idToken and refresh are the tokens, for the end-session hint and
	// the refresh; they never leave the package but through Session.
	idToken string
	refresh *oauth2.Token
	client  string
}

// Finish completes a sign-in: query is the provider's answer at the
// redirect URL and cookie the flow cookie's value. It checks the state,
// exchanges the code with the PKCE verifier, and verifies the ID token
// (signature, issuer, audience, expiry, nonce). A person whose groups map
// to no role gets a Login with a *NoRoleError.
func (c *Client) Finish(ctx context.Context, cookie string, query url.Values) (*Login, error) {
	f, err := c.open(cookie)
	if err != nil {
		return nil, err
	}
	if e := query.Get("error"); e != "" {
		return nil, &Error{Reason: "refused", Msg: fmt.Sprintf("the provider refused the sign-in: %s %s", e, query.Get("error_description"))}
	}
	if subtle.ConstantTimeCompare([]byte(query.Get("state")), []byte(f.State)) != 1 {
		return nil, &Error{Reason: "state", Msg: "the provider's answer does not belong to this browser's sign-in (state mismatch); sign in again"}
	}
	code := query.Get("code")
	if code == "" {
		return nil, &Error{Reason: "code", Msg: "the provider answered without a code"}
	}
	o := c.oauth
	o.RedirectURL = f.Redirect
	tok, err := o.Exchange(oidc.ClientContext(ctx, c.cfg.HTTPClient), code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return nil, &Error{Reason: "exchange", Msg: "the provider refused the code: " + exchangeError(err)}
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, &Error{Reason: "id_token", Msg: "the provider's answer holds no ID token (is the openid scope allowed?)"}
	}
	l, err := c.verify(ctx, c.web, raw, f.Nonce)
	if l != nil {
		l.Next, l.refresh, l.client = f.Next, tok, c.cfg.ClientID
	}
	return l, err
}

// open decrypts and checks the flow cookie.
func (c *Client) open(cookie string) (flow, error) {
	var f flow
	b, err := base64.RawURLEncoding.DecodeString(cookie)
	ns := c.aead.NonceSize()
	if err == nil && len(b) > ns {
		b, err = c.aead.Open(nil, b[:ns], b[ns:], nil)
	} else if err == nil {
		err = errors.New("short")
	}
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		return f, &Error{Reason: "flow", Msg: "this browser's sign-in is unknown (its cookie is missing or from another server process); sign in again"}
	}
	if c.cfg.Now().Unix() > f.Expires {
		return f, &Error{Reason: "flow", Msg: "the sign-in took longer than " + FlowTTL.String() + "; sign in again"}
	}
	return f, nil
}

// verify verifies an ID token with v, and its nonce when nonce is not
// empty, and maps its groups to a role.
func (c *Client) verify(ctx context.Context, v *oidc.IDTokenVerifier, raw, nonce string) (*Login, error) {
	idt, err := v.Verify(oidc.ClientContext(ctx, c.cfg.HTTPClient), raw)
	if err != nil {
		return nil, verifyError(err)
	}
	if nonce != "" && subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return nil, &Error{Reason: "nonce", Msg: "the ID token's nonce is not this sign-in's (a replayed token?)"}
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, &Error{Reason: "claims", Msg: "the ID token's claims: " + err.Error()}
	}
	email, _ := claims["email"].(string)
	l := &Login{Subject: idt.Subject, Email: email, Groups: groups(claims[c.cfg.GroupsClaim]), Expires: idt.Expiry, idToken: raw}
	role, ok := c.cfg.Roles.Role(l.Groups)
	if !ok {
		return l, &NoRoleError{Groups: l.Groups, Claim: c.cfg.GroupsClaim}
	}
	l.Role = role
	return l, nil
}

// groups reads a groups claim: a list of strings, or one string.
func groups(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, g := range v {
			if s, ok := g.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// EndSessionURL returns where a browser goes to end its session at the
// provider, coming back to after; empty when the provider offers no
// end_session_endpoint.
func (c *Client) EndSessionURL(l *Login, after string) string {
	if c.endSession == "" {
		return ""
	}
	q := url.Values{"client_id": {c.cfg.ClientID}}
	if after != "" {
		q.Set("post_logout_redirect_uri", after)
	}
	if l != nil && l.idToken != "" {
		q.Set("id_token_hint", l.idToken)
	}
	sep := "?"
	if strings.Contains(c.endSession, "?") {
		sep = "&"
	}
	return c.endSession + sep + q.Encode()
}

func random() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
