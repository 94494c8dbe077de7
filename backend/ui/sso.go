package ui

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/sso"
)

// The paths of single sign-on: the start, which sends the browser to the
// provider, and the callback, where the provider sends it back.
const (
	ssoStartPath    = "/login/sso"
	ssoCallbackPath = "/login/sso/callback"
	// ssoFlowCookie carries the sign-in's state, nonce and PKCE
	// verifier, encrypted, from the start to the callback. It is
	// SameSite=Lax: the callback is a navigation from the provider's
	// site, which a Strict cookie would miss.
	ssoFlowCookie = "rezuscloud_sso"
	// refreshTimeout bounds a session's refresh at the provider.
	refreshTimeout = 10 * time.Second
)

// ssoSessions are the provider's sessions behind the dashboard's sessions
// of single sign-on, by session cookie value: for the end-session hint at
// logout.
type ssoSessions struct {
	mu   sync.Mutex
	live map[string]ssoEntry
}

type ssoEntry struct {
	s       *sso.Session
	expires time.Time
}

func (ss *ssoSessions) put(value string, s *sso.Session, expires, now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.live == nil {
		ss.live = map[string]ssoEntry{}
	}
	for v, e := range ss.live {
		if !now.Before(e.expires) {
			delete(ss.live, v)
		}
	}
	ss.live[value] = ssoEntry{s: s, expires: expires}
}

func (ss *ssoSessions) take(value string) *sso.Session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	e := ss.live[value]
	delete(ss.live, value)
	return e.s
}

// routeSSO mounts the sign-in's start and callback when the dashboard has
// single sign-on.
func (h *handler) routeSSO(m *http.ServeMux) {
	if h.opts.SSO == nil {
		return
	}
	m.HandleFunc("GET "+ssoStartPath, h.ssoStart)
	m.HandleFunc("GET "+ssoCallbackPath, h.ssoCallback)
}

// ssoLink is the login page's link to single sign-on, empty without it.
func (h *handler) ssoLink(next string) string {
	if h.opts.SSO == nil {
		return ""
	}
	if next != "" && next != "/" {
		return ssoStartPath + "?next=" + url.QueryEscape(next)
	}
	return ssoStartPath
}

// base returns the URL under which the browser reaches the dashboard:
// the external URL, else the request's own host.
func (h *handler) base(r *http.Request) string {
	if h.opts.ExternalURL != "" {
		return strings.TrimRight(h.opts.ExternalURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// ssoStart sends the browser to the provider, with the flow cookie.
func (h *handler) ssoStart(w http.ResponseWriter, r *http.Request) {
	authURL, flow := h.opts.SSO.Begin(h.base(r)+ssoCallbackPath, safeNext(r.FormValue("next")))
	http.SetCookie(w, &http.Cookie{Name: ssoFlowCookie, Value: flow, Path: ssoStartPath, HttpOnly: true,
		Secure: h.secureFor(r), SameSite: http.SameSiteLaxMode, MaxAge: int(sso.FlowTTL.Seconds())})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// ssoCallback finishes the sign-in and starts the session. A person whose
// groups give no role gets a page that says so (403); any other failure
// the login page with the reason.
func (h *handler) ssoCallback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: ssoFlowCookie, Value: "", Path: ssoStartPath, MaxAge: -1,
		HttpOnly: true, Secure: h.secureFor(r), SameSite: http.SameSiteLaxMode})
	var flow string
	if c, err := r.Cookie(ssoFlowCookie); err == nil {
		flow = c.Value
	}
	c := h.opts.SSO
	l, err := c.Finish(r.Context(), flow, r.URL.Query())
	audit := h.srv.Audit()
	var noRole *sso.NoRoleError
	switch {
	case errors.As(err, &noRole):
		id := identityOf(l, "")
		audit.Warn("login refused", append(id.Who(), "method", "oidc", "reason", "no-role", "groups", strings.Join(l.Groups, ","), "remote", r.RemoteAddr)...)
		h.fail(w, r, http.StatusForbidden, "You signed in at the identity provider as "+id.Name+", but "+err.Error()+
			". Ask an administrator to add you to a group that the server's role map (--oidc-role-map) names.")
		return
	case err != nil:
		attrs := []any{"method", "oidc", "reason", sso.Reason(err), "remote", r.RemoteAddr}
		if l != nil {
			attrs = append(identityOf(l, "").Who(), attrs...)
		}
		audit.Warn("login failed", attrs...)
		h.showLogin(w, r, http.StatusUnauthorized, "Single sign-on failed: "+err.Error())
		return
	}
	id := identityOf(l, l.Role)
	session := c.NewSession(l)
	if !session.Refreshable() {
		id.Expires = l.Expires
	}
	value, sess := h.srv.Sessions().Start(id, h.recheck(id, session), backend.Elsewhere{Until: l.Expires})
	h.sso.put(value, session, sess.Expires, h.opts.Now())
	audit.Info("login", append(id.Who(), "method", "oidc", "role", id.Role.String(), "remote", r.RemoteAddr)...)
	http.SetCookie(w, &http.Cookie{Name: backend.SessionCookie, Value: value, Path: "/", HttpOnly: true,
		Secure: h.secureFor(r), SameSite: http.SameSiteStrictMode, Expires: sess.Expires,
		MaxAge: int(time.Until(sess.Expires).Seconds())})
	http.Redirect(w, r, safeNext(l.Next), http.StatusSeeOther)
}

// recheck is the session's Recheck: the role of the login while its ID
// token is valid, then what the provider's refresh gives. The first
// refusal ends the session for good and goes to the audit log.
func (h *handler) recheck(id backend.Identity, session *sso.Session) backend.Recheck {
	var mu sync.Mutex
	var refused error
	return func(now time.Time) (backend.Identity, error) {
		mu.Lock()
		defer mu.Unlock()
		if refused != nil {
			return backend.Identity{}, refused
		}
		l, err := session.Check(context.Background(), now, refreshTimeout)
		var role backend.Role
		if err == nil {
			role, err = backend.ParseRole(l.Role)
		}
		if err != nil {
			refused = err
			h.srv.Audit().Warn("session refused", append(id.Who(), "method", "oidc", "reason", sso.Reason(err), "detail", err.Error())...)
			return backend.Identity{}, err
		}
		if role != id.Role {
			h.srv.Audit().Info("role changed", append(id.Who(), "method", "oidc", "from", id.Role.String(), "to", role.String())...)
			id.Role = role
		}
		return id, nil
	}
}

// ssoLogout, for a session of single sign-on, writes the audit line and,
// when the provider has an end-session endpoint, a page that sends the
// browser there (a redirect would break the logout form's form-action
// policy); it reports whether it answered.
func (h *handler) ssoLogout(w http.ResponseWriter, r *http.Request, value string, sess backend.Session, ok bool) bool {
	if h.opts.SSO == nil || !ok || sess.Identity.Source != backend.SourceOIDC {
		return false
	}
	session := h.sso.take(value)
	h.srv.Audit().Info("logout", append(sess.Identity.Who(), "method", "oidc", "remote", r.RemoteAddr)...)
	var l *sso.Login
	if session != nil {
		l = session.Login()
	}
	to := h.opts.SSO.EndSessionURL(l, h.base(r)+"/login")
	if to == "" {
		return false
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	pages.execute(w, "bounce", &view{Title: "Logging out", Assets: assets.urls, Body: to}, nil)
	return true
}

// identityOf is the identity of a login, with role (empty: none yet).
func identityOf(l *sso.Login, role string) backend.Identity {
	id := backend.Identity{Name: cmp.Or(l.Email, l.Subject), Source: backend.SourceOIDC, Subject: l.Subject, Email: l.Email}
	if role != "" {
		id.Role, _ = backend.ParseRole(role)
	}
	return id
}
