// Package oidctest starts, for a test, a real OpenID Connect provider in
// the test's process on a loopback port: the example OpenID Provider of
// github.com/zitadel/oidc/v3 (a certified implementation), with the test's
// users, who carry groups (the "groups" claim of the ID token and the
// userinfo), a confidential web client for the dashboard (code flow with
// PKCE and refresh tokens) and a public client for the CLI (device flow,
// code flow with PKCE back to CLIRedirectURI on any port, and refresh
// tokens). Login drives the provider's login form as a browser
// would, ApproveDevice approves a device code, and RotateKey rotates the
// signing key. Only tests and benchmarks import it.
package oidctest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The client ids the provider registers unless Options name others.
const (
	WebClientID = "rezuscloud"
	CLIClientID = "rezusctl"
)

// CLIRedirectURI is the CLI client's redirect URI: a loopback address,
// which the provider takes with any port (RFC 8252 7.3), for a sign-in in
// a browser on the CLI's machine.
const CLIRedirectURI = "http://127.0.0.1/callback"

// GroupsScope is the scope that asks for the groups, and GroupsClaim the
// claim that carries them.
const (
	GroupsScope = "groups"
	GroupsClaim = "groups"
)

// User is a person the provider knows. The username is also the subject.
type User struct {
	Username string
	Password string
	Email    string
	Groups   []string
}

// Options configure a Provider. The zero value serves no users, with the
// client ids WebClientID and CLIClientID, a random web client secret and
// ID tokens that last an hour.
type Options struct {
	Users        []User
	WebClientID  string
	CLIClientID  string
	RedirectURIs []string // the web client's, exactly; AddRedirectURI adds more
	// IDTokenLifetime is how long an ID token lasts (SetIDTokenLifetime
	// changes it later).
	IDTokenLifetime time.Duration
}

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is the provider's issuer URL, http://127.0.0.1:PORT.
	Issuer          string
	WebClientID     string
	WebClientSecret string
	CLIClientID     string

	store *store
	srv   *http.Server
	done  chan struct{}

	mu              sync.Mutex
	redirects       []string
	idTokenLifetime time.Duration
}

// Start starts a provider for t and stops it when the test ends.
func Start(t testing.TB, opts Options) *Provider {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New starts a provider on 127.0.0.1 until Close.
func New(opts Options) (*Provider, error) {
	secret := make([]byte, 16)
	rand.Read(secret)
	p := &Provider{WebClientID: or(opts.WebClientID, WebClientID), CLIClientID: or(opts.CLIClientID, CLIClientID),
		WebClientSecret: hex.EncodeToString(secret), redirects: slices.Clone(opts.RedirectURIs),
		idTokenLifetime: opts.IDTokenLifetime, done: make(chan struct{})}
	if p.idTokenLifetime <= 0 {
		p.idTokenLifetime = time.Hour
	}
	if p.WebClientID == p.CLIClientID {
		return nil, errors.New("the web and the CLI client need distinct ids")
	}
	k, err := newKey(1)
	if err != nil {
		return nil, err
	}
	web := storage.WebClient(p.WebClientID, p.WebClientSecret, "http://127.0.0.1/unused")
	cli := storage.NativeClient(p.CLIClientID, "http://127.0.0.1/unused")
	us := &users{byName: map[string]User{}}
	p.store = &store{
		Storage: storage.NewStorageWithClients(us, map[string]*storage.Client{p.WebClientID: web, p.CLIClientID: cli}),
		users:   us,
		clients: map[string]op.Client{
			p.WebClientID: &client{Client: web, p: p, redirect: true,
				grants: []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}},
			p.CLIClientID: &client{Client: cli, p: p,
				grants: []oidc.GrantType{oidc.GrantTypeDeviceCode, oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}},
		},
		keys: []*key{k},
	}
	for _, u := range opts.Users {
		p.store.users.put(u)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.Issuer = "http://" + ln.Addr().String()
	handler := exampleop.SetupServer(p.Issuer, p.store, nil, false)
	p.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	go func() {
		defer close(p.done)
		p.srv.Serve(ln)
	}()
	return p, nil
}

// Close stops the provider. It may be called more than once.
func (p *Provider) Close() {
	p.srv.Close()
	<-p.done
}

// AddUser adds a user, or replaces the user of the same username (its
// groups, say: the next ID token or refresh carries the new ones).
func (p *Provider) AddUser(u User) { p.store.users.put(u) }

// RemoveUser forgets a user: its refresh tokens no longer give ID tokens.
func (p *Provider) RemoveUser(username string) {
	p.store.users.mu.Lock()
	defer p.store.users.mu.Unlock()
	delete(p.store.users.byName, username)
}

// AddRedirectURI registers one more redirect URI of the web client.
func (p *Provider) AddRedirectURI(uri string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.redirects = append(p.redirects, uri)
}

// SetIDTokenLifetime changes how long the ID tokens issued from now on
// last.
func (p *Provider) SetIDTokenLifetime(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idTokenLifetime = d
}

// RotateKey makes a new signing key current. The provider keeps
// publishing the previous key (keep) unless keep is false, when the keys
// endpoint lists only the new one.
func (p *Provider) RotateKey(keep bool) error {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	k, err := newKey(len(p.store.keys) + 1)
	if err != nil {
		return err
	}
	k.id = "oidctest-" + hex.EncodeToString(k.key.N.Bytes()[:4])
	if keep {
		p.store.keys = append([]*key{k}, p.store.keys...)
	} else {
		p.store.keys = []*key{k}
	}
	return nil
}

// KeyID is the id of the current signing key.
func (p *Provider) KeyID() string { return p.store.signingKey().id }

// Sign signs claims with the provider's current key, as the provider
// signs its ID tokens: for tests of a verifier's checks of everything
// but the signature (audience, issuer, expiry, nonce).
func (p *Provider) Sign(claims map[string]any) (string, error) {
	k := p.store.signingKey()
	return SignWith(k.key, k.id, claims)
}

// SignWith signs claims as a JWT with key, under key id kid.
func SignWith(priv any, kid string, claims map[string]any) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		return "", err
	}
	payload, err := jsonMarshal(claims)
	if err != nil {
		return "", err
	}
	sig, err := signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return sig.CompactSerialize()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
