package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Credential is what a client proves itself with: the bearer secret it
// sends with each request.
type Credential interface {
	// Bearer returns the secret to send as "Authorization: Bearer", or
	// "" to send none. Its errors never contain a secret.
	Bearer(ctx context.Context) (string, error)
}

// StaticToken is a secret that does not change, such as a token file's.
type StaticToken string

// Bearer returns the token.
func (t StaticToken) Bearer(context.Context) (string, error) { return string(t), nil }

// The sources of a stored login, as whoami names them.
const (
	LoginOIDC  = "oidc"
	LoginLocal = "local"
)

// RefreshMargin is how long before its expiry a stored ID token is
// refreshed.
const RefreshMargin = time.Minute

// Login is what a login leaves behind for later commands: an OpenID
// Connect ID token with the refresh token that renews it (Source
// LoginOIDC), or a local user's short-lived bearer token (LoginLocal).
// Its fields are secrets but for Source, User, Expiry, Issuer, ClientID,
// TokenURL and Scopes.
type Login struct {
	Source string `json:"source"`
	// User names the person, for messages: the ID token's e-mail
	// address (its subject when there is none), or the local user.
	User string `json:"user,omitempty"`
	// Token is sent as the bearer: the ID token, or the local login's
	// token.
	Token  string    `json:"token"`
	Expiry time.Time `json:"expiry,omitzero"`
	// RefreshToken renews Token at the provider's TokenURL, as the
	// public client ClientID, asking for Scopes.
	RefreshToken string   `json:"refresh-token,omitempty"`
	Issuer       string   `json:"issuer,omitempty"`
	ClientID     string   `json:"client-id,omitempty"`
	TokenURL     string   `json:"token-url,omitempty"`
	Scopes       []string `json:"scopes,omitempty"`
}

// ExpiredError is a stored login that has expired and cannot be renewed:
// it has no refresh token, or the provider refused to renew it.
type ExpiredError struct {
	Login Login
	// Err is the provider's refusal, nil for a login without a refresh
	// token.
	Err error
}

// Error says whose login ended, when, and how to log in again.
func (e *ExpiredError) Error() string {
	again := "rezusctl login"
	if e.Login.Source == LoginLocal {
		again += " --username " + e.Login.User
	}
	who := e.Login.User
	if who == "" {
		who = e.Login.Source
	}
	msg := fmt.Sprintf("the login of %s expired at %s", who, e.Login.Expiry.UTC().Format(time.RFC3339))
	if e.Err != nil {
		msg += " and could not be renewed: " + e.Err.Error()
	}
	return msg + "; log in again with " + again
}

func (e *ExpiredError) Unwrap() error { return e.Err }

// Refreshing is a stored Login as a Credential. It sends the login's
// token while more than RefreshMargin of it is left; after that it renews
// an OIDC login with its refresh token, hands the renewed login to the
// save function it was given, and sends the new ID token. It is safe for
// concurrent use and renews once for all callers.
type Refreshing struct {
	mu    sync.Mutex
	login Login
	save  func(Login) error
	load  func() (Login, bool)
	lock  func(context.Context) (func(), error)
	http  *http.Client
	now   func() time.Time
}

// NewRefreshing returns the credential of login. save, when not nil,
// stores each renewed login; hc talks to the provider (nil: a client
// with 30 s timeouts).
func NewRefreshing(login Login, save func(Login) error, hc *http.Client) *Refreshing {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Refreshing{login: login, save: save, http: hc, now: time.Now}
}

// WithLoad gives r the stored login's reader: before a renewal, r takes
// the stored login when another process has renewed it since, and its
// refresh token when the provider rotated it. It returns r.
func (r *Refreshing) WithLoad(load func() (Login, bool)) *Refreshing {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.load = load
	return r
}

// WithLock gives r the lock that processes sharing the stored login take
// around a renewal (FileLock): the first renews, and the others, once
// they have the lock, take its renewal from the store (WithLoad) instead
// of renewing with a refresh token that the provider may have rotated
// away. It returns r.
func (r *Refreshing) WithLock(lock func(context.Context) (unlock func(), err error)) *Refreshing {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lock = lock
	return r
}

// Login returns the login as it is now, renewed or not.
func (r *Refreshing) Login() Login {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.login
}

// Bearer returns the login's token, renewed first when it expires within
// RefreshMargin. A login that has expired and cannot be renewed is an
// *ExpiredError.
func (r *Refreshing) Bearer(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if fresh(r.login, now) {
		return r.login.Token, nil
	}
	if stored, ok := r.stored(); ok {
		r.login = stored
		if fresh(stored, now) {
			return stored.Token, nil
		}
	}
	if r.lock != nil && r.login.RefreshToken != "" && r.login.TokenURL != "" {
		unlock, err := r.lock(ctx)
		if err != nil {
			return "", fmt.Errorf("wait for another renewal of the login: %w", err)
		}
		defer unlock()
		// Another process may have renewed it while this one waited.
		if stored, ok := r.stored(); ok {
			r.login = stored
			if fresh(stored, now) {
				return stored.Token, nil
			}
		}
	}
	l := r.login
	if l.RefreshToken == "" || l.TokenURL == "" {
		if now.Before(l.Expiry) {
			return l.Token, nil
		}
		return "", &ExpiredError{Login: l}
	}
	renewed, err := r.refresh(ctx, l)
	if err != nil {
		if now.Before(l.Expiry) {
			// It still works for the rest of its minute.
			return l.Token, nil
		}
		return "", &ExpiredError{Login: l, Err: err}
	}
	r.login = renewed
	if r.save != nil {
		if err := r.save(renewed); err != nil {
			return "", fmt.Errorf("save the renewed login: %w", err)
		}
	}
	return renewed.Token, nil
}

// fresh reports whether l has more than RefreshMargin left at now.
func fresh(l Login, now time.Time) bool {
	return l.Expiry.IsZero() || now.Add(RefreshMargin).Before(l.Expiry)
}

// stored returns the stored login when it is the same person's at the
// same provider and newer than r's.
func (r *Refreshing) stored() (Login, bool) {
	if r.load == nil {
		return Login{}, false
	}
	s, ok := r.load()
	l := r.login
	if !ok || s.Source != l.Source || s.User != l.User || s.Issuer != l.Issuer || !s.Expiry.After(l.Expiry) {
		return Login{}, false
	}
	return s, true
}

// refresh renews l at its provider's token endpoint.
func (r *Refreshing) refresh(ctx context.Context, l Login) (Login, error) {
	conf := &oauth2.Config{
		ClientID: l.ClientID,
		Endpoint: oauth2.Endpoint{TokenURL: l.TokenURL, AuthStyle: oauth2.AuthStyleInParams},
		Scopes:   l.Scopes,
	}
	ctx = context.WithValue(ctx, oauth2.HTTPClient, r.http)
	tok, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: l.RefreshToken}).Token()
	if err != nil {
		return l, ProviderError(err)
	}
	renewed, err := LoginFromToken(tok, l)
	if err != nil {
		return l, err
	}
	return renewed, nil
}

// LoginFromToken is the OIDC login that a token response of the
// provider makes of prev (whose Issuer, ClientID, TokenURL and Scopes it
// keeps): its ID token, that token's expiry, and its refresh token, or
// prev's when the provider did not rotate it.
func LoginFromToken(tok *oauth2.Token, prev Login) (Login, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return prev, errors.New("the provider answered without an ID token (is the scope openid granted?)")
	}
	claims, err := ParseIDToken(raw)
	if err != nil {
		return prev, err
	}
	l := prev
	l.Source = LoginOIDC
	l.Token = raw
	l.Expiry = claims.Expiry()
	l.User = claims.Name()
	if tok.RefreshToken != "" {
		l.RefreshToken = tok.RefreshToken
	}
	return l, nil
}

// IDClaims are the claims of an ID token that a login keeps.
type IDClaims struct {
	Issuer   string          `json:"iss"`
	Subject  string          `json:"sub"`
	Audience json.RawMessage `json:"aud"`
	Exp      int64           `json:"exp"`
	Email    string          `json:"email"`
	Nonce    string          `json:"nonce"`
}

// Expiry is the token's expiry.
func (c IDClaims) Expiry() time.Time { return time.Unix(c.Exp, 0).UTC() }

// Name is the e-mail address, or the subject without one.
func (c IDClaims) Name() string {
	if c.Email != "" {
		return c.Email
	}
	return c.Subject
}

// ParseIDToken reads the claims of an ID token without checking its
// signature: the client only needs its expiry and whom it names, and the
// server, which trusts nothing it has not verified, checks the rest.
func ParseIDToken(raw string) (IDClaims, error) {
	var c IDClaims
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return c, errors.New("the ID token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return c, errors.New("the ID token's payload is not base64url")
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, fmt.Errorf("the ID token's claims: %v", err)
	}
	if c.Exp == 0 {
		return c, errors.New("the ID token has no expiry (exp)")
	}
	return c, nil
}

// ProviderError shortens an error of a provider's token or device
// endpoint to its error code and description, which name no secret.
func ProviderError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode != "" {
		msg := "the provider refused: " + re.ErrorCode
		if re.ErrorDescription != "" {
			msg += " (" + re.ErrorDescription + ")"
		}
		return errors.New(msg)
	}
	if re != nil {
		return fmt.Errorf("the provider answered %d", re.Response.StatusCode)
	}
	return fmt.Errorf("the provider's token endpoint: %v", innermost(err))
}
