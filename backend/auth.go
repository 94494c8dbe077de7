package backend

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

type identityKey struct{}

// IdentityFrom returns the identity Authenticate attached to ctx.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// WithIdentity returns a copy of ctx that carries id, for handlers that are
// called without Authenticate in front of them.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// Authenticate returns middleware that identifies the caller of every
// request and answers 401 (with WWW-Authenticate) when it cannot.
//
// Credentials are HTTP basic auth, as tofu's http backend sends it (user
// name = token name, password = token), or `Authorization: Bearer TOKEN`.
// When tokens has no tokens file, a request without valid credentials is
// Anonymous, an admin: the server allows that only on loopback. Valid
// credentials still name the caller then, with the admin role.
//
// Secrets are never logged; the token name is, as the request log's
// `token` attribute. The server's own mounts (Server.Handle) also accept
// a dashboard session cookie for reads of the API; see Sessions.
func Authenticate(tokens *Tokens, log *slog.Logger, next http.Handler) http.Handler {
	return authenticate(tokens, nil, log, next)
}

// authenticate is Authenticate that also accepts a session of sessions
// (when not nil) where sessionAllowed says so, for requests without other
// credentials.
func authenticate(tokens *Tokens, sessions *Sessions, log *slog.Logger, next http.Handler) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := identify(tokens, r)
		if errors.Is(err, errNoCredentials) && sessions != nil && sessionAllowed(r) {
			if sess, ok := sessions.FromRequest(r); ok {
				id, err = sess.Identity, nil
			}
		}
		if err != nil {
			if tokens.open() {
				id = Anonymous
			} else {
				log.Warn("authentication failed", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
				// A browser asks for a password on a Basic challenge;
				// a page whose session ended should not.
				if _, err := r.Cookie(SessionCookie); err != nil {
					w.Header().Add("WWW-Authenticate", `Basic realm="rezuscloud", charset="UTF-8"`)
				}
				w.Header().Add("WWW-Authenticate", `Bearer realm="rezuscloud"`)
				api.WriteError(w, unauthorized(err))
				return
			}
		} else if tokens.open() {
			id.Role = RoleAdmin
		}
		if rl := requestLogFrom(r.Context()); rl != nil {
			rl.token = id.Name
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// unauthorized is the 401 of a request whose credentials failed with err.
// An expired credential is named with its expiry.
func unauthorized(err error) error {
	var expired *ExpiredError
	if errors.As(err, &expired) {
		hint := "log in again"
		if expired.What == "token" {
			hint = "ask an admin for a new one"
		}
		return api.Errorf(http.StatusUnauthorized, "%v: it is no longer accepted; %s", err, hint)
	}
	return api.Errorf(http.StatusUnauthorized, "%v: send a token with HTTP basic auth (user = token name) or as `Authorization: Bearer TOKEN`", err)
}

// identify reads the request's credentials and checks them.
func identify(tokens *Tokens, r *http.Request) (Identity, error) {
	if tokens == nil {
		return Identity{}, errNoCredentials
	}
	if user, pass, ok := r.BasicAuth(); ok {
		if user == "" {
			return Identity{}, errBadCredentials
		}
		return tokens.check(user, pass)
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return Identity{}, errNoCredentials
	}
	scheme, secret, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return Identity{}, errBadCredentials
	}
	return tokens.check("", strings.TrimSpace(secret))
}

// open reports whether t authenticates without a tokens file or any
// other way in (Require).
func (t *Tokens) open() bool {
	if t == nil {
		return true
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.path == "" && !t.closed
}

// Open reports whether the server runs without a tokens file, so that every
// request is allowed as an admin. The server refuses to listen beyond
// loopback then.
func (t *Tokens) Open() bool { return t.open() }

// requireRole answers 403 and returns false unless the request's identity
// has at least role.
func requireRole(w http.ResponseWriter, r *http.Request, role Role, what string) (Identity, bool) {
	id, ok := IdentityFrom(r.Context())
	if !ok {
		api.WriteError(w, api.Errorf(http.StatusUnauthorized, "request is not authenticated"))
		return Identity{}, false
	}
	if id.Role < role {
		api.WriteError(w, api.Errorf(http.StatusForbidden, "token %q has role %s; %s needs %s", id.Name, id.Role, what, role))
		return id, false
	}
	return id, true
}

// RequireRole wraps h, mounted with Server.Handle, so that only callers
// with at least role reach it; what names the action in the 403 message.
func RequireRole(role Role, what string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := requireRole(w, r, role, what); ok {
			h.ServeHTTP(w, r)
		}
	})
}
