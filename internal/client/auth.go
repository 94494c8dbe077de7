package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The paths of the server's auth endpoints.
const (
	AuthConfigPath = "/api/v1/auth/config"
	AuthLoginPath  = "/api/v1/auth/login"
	AuthLogoutPath = "/api/v1/auth/logout"
	AuthWhoamiPath = "/api/v1/auth/whoami"
)

// AuthConfig is how a server's single sign-on is reached from a
// terminal: the OpenID Connect issuer, the public client that command
// lines sign in as, and the scopes to ask for.
type AuthConfig struct {
	Issuer      string   `json:"issuer"`
	CLIClientID string   `json:"cliClientID"`
	Scopes      []string `json:"scopes,omitempty"`
}

// ErrNoSSO is the answer of a server that has no single sign-on.
var ErrNoSSO = errors.New("the server has no single sign-on")

// AuthConfig asks the server how to sign in with its OpenID Connect
// provider. A server without single sign-on is ErrNoSSO.
func (c *Client) AuthConfig(ctx context.Context) (*AuthConfig, error) {
	var ac AuthConfig
	err := c.Get(ctx, AuthConfigPath, &ac)
	if IsNotFound(err) {
		return nil, fmt.Errorf("%w (%s answers 404 for %s)", ErrNoSSO, c.Server(), AuthConfigPath)
	}
	if err != nil {
		return nil, err
	}
	if ac.Issuer == "" || ac.CLIClientID == "" {
		return nil, fmt.Errorf("%w for command lines (%s names no issuer or CLI client)", ErrNoSSO, AuthConfigPath)
	}
	return &ac, nil
}

// LoginAnswer is the server's answer to a local user's login: a
// short-lived bearer token.
type LoginAnswer struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	User      string    `json:"user"`
	Role      string    `json:"role"`
}

// LocalLogin logs the local user in with a password and returns the
// bearer token the server made for it. Neither password nor token
// appears in an error.
func (c *Client) LocalLogin(ctx context.Context, user, password string) (*LoginAnswer, error) {
	body := mustMarshal(struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}{user, password})
	b, err := c.send(ctx, http.MethodPost, AuthLoginPath, body)
	if err != nil {
		return nil, err
	}
	var a LoginAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("POST %s: decode answer: %v", AuthLoginPath, err)
	}
	if a.Token == "" {
		return nil, fmt.Errorf("POST %s: the answer holds no token", AuthLoginPath)
	}
	return &a, nil
}

// Logout ends the session or login token the client sends, on the
// server.
func (c *Client) Logout(ctx context.Context) error {
	_, err := c.send(ctx, http.MethodPost, AuthLogoutPath, nil)
	return err
}

// Whoami is who the server takes the caller for.
type Whoami struct {
	User   string `json:"user"`
	Role   string `json:"role"`
	Source string `json:"source"`
	// Subject and Email are the OIDC subject and e-mail address.
	Subject   string    `json:"subject,omitempty"`
	Email     string    `json:"email,omitempty"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Whoami asks the server whom it takes the caller for.
func (c *Client) Whoami(ctx context.Context) (*Whoami, error) {
	var w Whoami
	if err := c.Get(ctx, AuthWhoamiPath, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// send is post for answers of any 2xx status, bounded by the client's
// timeout.
func (c *Client) send(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	return c.post(ctx, path, body, 0)
}

// Provider is what an OpenID Connect provider's discovery document says
// of it.
type Provider struct {
	Issuer                      string   `json:"issuer"`
	AuthorizationEndpoint       string   `json:"authorization_endpoint"`
	TokenEndpoint               string   `json:"token_endpoint"`
	DeviceAuthorizationEndpoint string   `json:"device_authorization_endpoint"`
	RevocationEndpoint          string   `json:"revocation_endpoint"`
	ScopesSupported             []string `json:"scopes_supported"`
}

// Discover reads the discovery document of issuer
// (ISSUER/.well-known/openid-configuration), which must name issuer as
// its issuer and a token endpoint.
func Discover(ctx context.Context, hc *http.Client, issuer string) (*Provider, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	where := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return nil, fmt.Errorf("issuer %q: %v", issuer, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("discover the provider: %w", &ConnError{Server: issuer, Err: err})
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("discover the provider: %w", &ConnError{Server: issuer, Err: err})
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("discover the provider: %s answers %d", where, resp.StatusCode)
	}
	var p Provider
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("discover the provider: %s: %v", where, err)
	}
	if p.Issuer != issuer {
		return nil, fmt.Errorf("discover the provider: %s names the issuer %q, want %q", where, p.Issuer, issuer)
	}
	if p.TokenEndpoint == "" {
		return nil, fmt.Errorf("discover the provider: %s names no token_endpoint", where)
	}
	return &p, nil
}

// Supports reports whether the provider offers scope; a provider that
// lists no scopes is taken to offer it.
func (p *Provider) Supports(scope string) bool {
	if len(p.ScopesSupported) == 0 {
		return true
	}
	for _, s := range p.ScopesSupported {
		if s == scope {
			return true
		}
	}
	return false
}

// Revoke asks l's provider to revoke its refresh token (RFC 7009), when
// the provider's discovery document names a revocation endpoint.
func Revoke(ctx context.Context, hc *http.Client, l Login) error {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	p, err := Discover(ctx, hc, l.Issuer)
	if err != nil {
		return err
	}
	if p.RevocationEndpoint == "" {
		return nil
	}
	form := url.Values{"token": {l.RefreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {l.ClientID}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.RevocationEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("revocation endpoint: %v", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return &ConnError{Server: l.Issuer, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answers %d", p.RevocationEndpoint, resp.StatusCode)
	}
	return nil
}
