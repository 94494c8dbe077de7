package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// store is the example OP's storage with users that carry groups, the
// kit's own clients and signing keys that rotate. The ID token and the
// userinfo carry the user's groups in the "groups" claim.
type store struct {
	*storage.Storage
	users   *users
	clients map[string]op.Client

	mu   sync.Mutex
	keys []*key // the signing key first, then the older keys still published
}

// CreateAccessAndRefreshTokens tells the example storage which client a
// device login is for: it knows the client of code flows and refreshes
// only, and a refresh token without one is refused (invalid_grant).
func (s *store) CreateAccessAndRefreshTokens(ctx context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	if d, ok := req.(*op.DeviceAuthorizationState); ok {
		req = &storage.AuthRequest{ApplicationID: d.ClientID, UserID: d.Subject, Scopes: d.Scopes}
	}
	return s.Storage.CreateAccessAndRefreshTokens(ctx, req, current)
}

// users is the example's UserStore over the test's users; a user's ID is
// its username, as the example's device login takes it.
type users struct {
	mu     sync.Mutex
	byName map[string]User
}

func (u *users) GetUserByID(id string) *storage.User { return u.GetUserByUsername(id) }

func (u *users) GetUserByUsername(name string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	usr, ok := u.byName[name]
	if !ok {
		return nil
	}
	return &storage.User{ID: usr.Username, Username: usr.Username, Password: usr.Password,
		FirstName: usr.Username, Email: usr.Email, EmailVerified: true}
}

func (u *users) ExampleClientID() string { return storage.ServiceUserID }

func (u *users) groups(name string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.byName[name].Groups)
}

func (u *users) put(usr User) {
	u.mu.Lock()
	defer u.mu.Unlock()
	usr.Groups = slices.Clone(usr.Groups)
	u.byName[usr.Username] = usr
}

// GetClientByClientID answers the kit's clients.
func (s *store) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, fmt.Errorf("client %q not found", id)
	}
	return c, nil
}

// SetUserinfoFromRequest adds the groups to the ID token's claims.
func (s *store) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	s.addGroups(info, req.GetSubject(), scopes)
	return nil
}

// SetUserinfoFromToken adds the groups to the userinfo endpoint's answer.
func (s *store) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, info, tokenID, subject, origin); err != nil {
		return err
	}
	s.addGroups(info, subject, []string{GroupsScope})
	return nil
}

func (s *store) addGroups(info *oidc.UserInfo, subject string, scopes []string) {
	if slices.Contains(scopes, GroupsScope) {
		info.AppendClaims(GroupsClaim, s.users.groups(subject))
	}
}

// key is an RSA signing key with its key id.
type key struct {
	id  string
	key *rsa.PrivateKey
}

func newKey(n int) (*key, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &key{id: fmt.Sprintf("oidctest-%d", n), key: k}, nil
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *key) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *key) ID() string                                  { return k.id }
func (k *key) Use() string                                 { return "sig" }

// signing is the private half, for op.SigningKey.
type signing struct{ *key }

func (k signing) Key() any { return k.key.key }

// public is the public half, for op.Key.
type public struct{ *key }

func (k public) Key() any { return &k.key.key.PublicKey }

func (s *store) signingKey() *key {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[0]
}

// SigningKey is the current key.
func (s *store) SigningKey(context.Context) (op.SigningKey, error) {
	return signing{s.signingKey()}, nil
}

// SignatureAlgorithms is RS256 only.
func (s *store) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

// KeySet publishes the current key and the older ones kept.
func (s *store) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		out[i] = public{k}
	}
	return out, nil
}

// client is a client of the example's storage with the kit's settings:
// the groups scope, profile and e-mail claims in the ID token, and the
// ID token lifetime of the provider.
type client struct {
	*storage.Client
	p        *Provider
	redirect bool // the web client, whose redirect URIs the test adds to
	grants   []oidc.GrantType
}

func (c *client) RedirectURIs() []string {
	if !c.redirect {
		return []string{CLIRedirectURI}
	}
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return slices.Clone(c.p.redirects)
}

// RedirectURIGlobs is empty: a redirect URI must be registered exactly.
func (c *client) RedirectURIGlobs() []string { return nil }

// PostLogoutRedirectURIGlobs lets the end-session endpoint return to any
// loopback address and to any page of the web client's redirect URIs'
// origins.
func (c *client) PostLogoutRedirectURIGlobs() []string {
	globs := []string{"http://127.0.0.1:*/**", "http://localhost:*/**"}
	for _, r := range c.RedirectURIs() {
		if u, err := url.Parse(r); err == nil {
			globs = append(globs, u.Scheme+"://"+u.Host+"/**")
		}
	}
	return globs
}

func (c *client) GrantTypes() []oidc.GrantType { return c.grants }

func (c *client) IsScopeAllowed(scope string) bool { return scope == GroupsScope }

func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }

func (c *client) IDTokenLifetime() time.Duration {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.p.idTokenLifetime
}

var (
	_ op.Client           = (*client)(nil)
	_ op.HasRedirectGlobs = (*client)(nil)
	_ op.Storage          = (*store)(nil)
)
