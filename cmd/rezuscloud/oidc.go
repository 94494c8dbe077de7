package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/backend/sso"
)

// AuthConfigPath answers what rezusctl login needs to sign in with the
// server's provider; it needs no credential.
const AuthConfigPath = backend.APIPrefix + "auth/config"

// oidcTimeout bounds the discovery at start and a bearer's key fetch.
const oidcTimeout = 30 * time.Second

// oidcFlags configure single sign-on with an OpenID Connect provider.
type oidcFlags struct {
	issuer, clientID, clientSecretFile, cliClientID string
	scopes, groupsClaim, roleMap                    string
}

func addOIDCFlags(fs *pflag.FlagSet, f *oidcFlags) {
	fs.StringVar(&f.issuer, "oidc-issuer", "", "issuer `URL` of the OpenID Connect provider people sign in with (Dex, Keycloak, Okta, Entra ID, ...); with it the dashboard offers single sign-on and the API accepts the provider's ID tokens (see docs/sso.md)")
	fs.StringVar(&f.clientID, "oidc-client-id", "", "client `ID` of the dashboard at the provider (a confidential client of the code flow, redirect URI EXTERNAL-URL/login/sso/callback)")
	fs.StringVar(&f.clientSecretFile, "oidc-client-secret-file", "", "`FILE` holding the dashboard client's secret")
	fs.StringVar(&f.cliClientID, "oidc-cli-client-id", "", "client `ID` of rezusctl at the provider (a public client, device flow or loopback redirect); its ID tokens are accepted as bearer credentials too")
	fs.StringVar(&f.scopes, "oidc-scopes", strings.Join(sso.DefaultScopes, ","), "`SCOPES` a sign-in asks for, comma-separated; add offline_access where the provider gives refresh tokens only with it")
	fs.StringVar(&f.groupsClaim, "oidc-groups-claim", sso.DefaultGroupsClaim, "`CLAIM` of the ID token that lists the person's groups")
	fs.StringVar(&f.roleMap, "oidc-role-map", "", "`MAP` from groups to roles, 'platform-admins=admin,platform=edit,*=view' (the highest role wins; '*' is everyone else, and without it a person in no mapped group gets no access), or @FILE")
}

// authConfig is the answer of AuthConfigPath.
type authConfig struct {
	Issuer      string   `json:"issuer"`
	CLIClientID string   `json:"cliClientID"`
	Scopes      []string `json:"scopes"`
}

// openOIDC discovers the provider of --oidc-issuer, makes its ID tokens
// a way into the API (which closes the server) and returns the
// dashboard's client; nil without --oidc-issuer. It also serves
// AuthConfigPath, which says whether there is single sign-on.
func (m *Main) openOIDC() (*sso.Client, error) {
	c, err := newSSOClient(&m.flags.oidc)
	if err != nil {
		return nil, err
	}
	m.Server.HandleUnauthenticated("GET "+AuthConfigPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c == nil {
			api.WriteError(w, api.Errorf(http.StatusNotFound, "this server has no single sign-on (--oidc-issuer); log in with a token or a user"))
			return
		}
		api.WriteJSON(w, http.StatusOK, authConfig{Issuer: c.Issuer(), CLIClientID: c.CLIClientID(), Scopes: c.Scopes()})
	}))
	if c == nil {
		return nil, nil
	}
	m.Server.Tokens().AddCheck(bearerCheck(c, m.Server))
	m.log.Info("single sign-on", "issuer", c.Issuer(), "roles", c.Roles().String())
	return c, nil
}

// newSSOClient checks the flags and discovers the provider.
func newSSOClient(f *oidcFlags) (*sso.Client, error) {
	if f.issuer == "" {
		if f.clientID != "" || f.clientSecretFile != "" || f.cliClientID != "" || f.roleMap != "" {
			return nil, errors.New("the --oidc-* flags need --oidc-issuer")
		}
		return nil, nil
	}
	if f.clientID == "" || f.roleMap == "" {
		return nil, errors.New("--oidc-issuer needs --oidc-client-id and --oidc-role-map (which groups get which role)")
	}
	roles, err := sso.ParseRoleMap(f.roleMap)
	if err != nil {
		return nil, err
	}
	var secret string
	if f.clientSecretFile != "" {
		b, err := os.ReadFile(f.clientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		if secret = strings.TrimSpace(string(b)); secret == "" {
			return nil, fmt.Errorf("--oidc-client-secret-file %s is empty", f.clientSecretFile)
		}
	}
	var scopes []string
	for s := range strings.SplitSeq(f.scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			scopes = append(scopes, s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), oidcTimeout)
	defer cancel()
	return sso.New(ctx, sso.Config{Issuer: f.issuer, ClientID: f.clientID, ClientSecret: secret, CLIClientID: f.cliClientID,
		Scopes: scopes, GroupsClaim: f.groupsClaim, Roles: roles})
}

// bearerCheck accepts the provider's ID tokens as bearer credentials. A
// refused one goes to the audit log with its reason, never the token.
func bearerCheck(c *sso.Client, srv *backend.Server) backend.CredentialCheck {
	return func(name, secret string) (backend.Identity, error) {
		if name != "" {
			return backend.Identity{}, backend.ErrNotMine
		}
		ctx, cancel := context.WithTimeout(context.Background(), oidcTimeout)
		defer cancel()
		l, err := c.VerifyBearer(ctx, secret)
		if errors.Is(err, sso.ErrNotMine) {
			return backend.Identity{}, backend.ErrNotMine
		}
		if err != nil {
			attrs, who := []any{"method", "oidc-bearer", "reason", sso.Reason(err)}, "(unknown)"
			if l != nil {
				who = cmp.Or(l.Email, l.Subject)
				attrs = append([]any{"who", who, "source", "oidc", "subject", l.Subject}, attrs...)
			}
			srv.AuditRefused("credential refused", who, sso.Reason(err), attrs...)
			return backend.Identity{}, fmt.Errorf("OIDC ID token refused: %w", err)
		}
		role, err := backend.ParseRole(l.Role)
		if err != nil {
			return backend.Identity{}, err
		}
		return backend.Identity{Name: cmp.Or(l.Email, l.Subject), Role: role, Source: backend.SourceOIDC,
			Subject: l.Subject, Email: l.Email, Expires: l.Expires}, nil
	}
}
