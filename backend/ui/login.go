package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/backend"
)

// csrfCookie carries the double-submit token of the login form, which is
// filled in before there is a session to tie a token to.
const csrfCookie = "rezuscloud_login_csrf"

// maxFormBytes bounds the body of the login and logout forms.
const maxFormBytes = 8 << 10

type loginPage struct {
	Next    string
	CSRF    string
	Message string
	// SSO is the path that starts a single sign-on with the
	// organisation's OpenID Connect provider; empty without one.
	SSO string
	// Users says that the server has local users, who log in with a
	// user name and a password.
	Users bool
}

// needLogin answers a request that has no session: fragments get 401 (the
// live script says the session ended), pages go to the login page.
//
// The session cookie is SameSite=Strict, so a browser leaves it off a
// navigation that another site started, such as a link in a commit status
// on the forge. Such a request gets a page that navigates to the same URL
// again, this time from this site, so that a logged-in browser sends its
// cookie; a request from this site goes to the login page.
func (h *handler) needLogin(w http.ResponseWriter, r *http.Request, fragment bool) {
	if fragment {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "log in again: the session ended", http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		pages.execute(w, "bounce", &view{Title: "Opening", Assets: assets.urls, Body: safeNext(r.URL.RequestURI())}, nil)
		return
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

func (h *handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if h.srv.Tokens().Open() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	h.showLogin(w, r, http.StatusOK, "")
}

// showLogin renders the login form with a fresh double-submit token.
func (h *handler) showLogin(w http.ResponseWriter, r *http.Request, code int, msg string) {
	token := newToken()
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: token, Path: "/login", HttpOnly: true,
		Secure: h.secureFor(r), SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	v := &view{Title: "Log in", Assets: assets.urls, Now: h.opts.Now().UTC(),
		Body: loginPage{Next: safeNext(r.FormValue("next")), CSRF: token, Message: msg, SSO: h.ssoLink(safeNext(r.FormValue("next")))}}
	h.render(w, r, code, "login", v, nil)
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.srv.Tokens().Open() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !h.sameOrigin(r) {
		h.fail(w, r, http.StatusForbidden, "The login form was sent from another site.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.showLogin(w, r, http.StatusBadRequest, "The form could not be read; try again.")
		return
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || !equal(c.Value, r.PostForm.Get("csrf")) {
		h.showLogin(w, r, http.StatusForbidden, "The form expired; try again.")
		return
	}
	value, sess, err := h.srv.Sessions().Login(r.RemoteAddr, strings.TrimSpace(r.PostForm.Get("token")))
	if err != nil {
		h.log.Warn("dashboard login failed", "remote", r.RemoteAddr, "reason", err.Error())
		code, msg := loginRefusal(err)
		var limit *backend.LoginLimitError
		if errors.As(err, &limit) {
			w.Header().Set("Retry-After", strconv.Itoa(limit.RetryAfter()))
		}
		h.showLogin(w, r, code, msg)
		return
	}
	h.log.Info("dashboard login", "token", sess.Identity.Name, "role", sess.Identity.Role.String(), "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: backend.SessionCookie, Value: value, Path: "/", HttpOnly: true,
		Secure: h.secureFor(r), SameSite: http.SameSiteStrictMode, Expires: sess.Expires,
		MaxAge: int(h.srv.Sessions().TTL().Seconds())})
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: "", Path: "/login", MaxAge: -1,
		HttpOnly: true, Secure: h.secureFor(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout ends the session on the server, so that its cookie is worthless
// wherever a copy of it is, and clears the cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if h.srv.Tokens().Open() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !h.sameOrigin(r) {
		h.fail(w, r, http.StatusForbidden, "The logout form was sent from another site.")
		return
	}
	c, err := r.Cookie(backend.SessionCookie)
	if err != nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	sess, ok := h.srv.Sessions().Check(c.Value)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if ok && (r.ParseForm() != nil || !sess.CheckCSRF(r.PostForm.Get("csrf"))) {
		h.fail(w, r, http.StatusForbidden, "The logout form expired; reload the page and log out again.")
		return
	}
	h.srv.Sessions().Logout(c.Value)
	if ok {
		h.log.Info("dashboard logout", "token", sess.Identity.Name, "remote", r.RemoteAddr)
	}
	http.SetCookie(w, &http.Cookie{Name: backend.SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: h.secureFor(r), SameSite: http.SameSiteStrictMode})
	if h.ssoLogout(w, r, c.Value, sess, ok) {
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// loginRefusal returns the status and the login page's message for a
// login that Sessions.Login refused with err.
func loginRefusal(err error) (int, string) {
	var limit *backend.LoginLimitError
	switch {
	case errors.As(err, &limit) && limit.Invalid:
		return http.StatusUnauthorized, "That token is not valid, and there were " + limit.Error() + "."
	case errors.As(err, &limit):
		return http.StatusTooManyRequests, "There were " + limit.Error() + "."
	}
	return http.StatusUnauthorized, "That token is not valid."
}

// secureFor reports whether cookies set for r must be Secure: under TLS,
// or behind a proxy that --external-url says speaks https.
func (h *handler) secureFor(r *http.Request) bool { return h.secure || r.TLS != nil }

// sameOrigin reports whether a form post came from a page of this server,
// as far as the browser says: an Origin header, when present, must name
// this host (or the external URL's).
func (h *handler) sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	if u.Host == r.Host {
		return true
	}
	if ext, err := url.Parse(h.opts.ExternalURL); err == nil && h.opts.ExternalURL != "" {
		return u.Scheme == ext.Scheme && u.Host == ext.Host
	}
	return false
}

// safeNext returns next when it is a path on this server, and "/"
// otherwise, so that the login form cannot send anyone elsewhere.
// Browsers drop tabs and newlines from a URL and read a backslash as a
// slash, so "/\t/host" and "/\\host" reach another origin, as "//host"
// does: next must start with exactly one '/' and hold no control
// characters and no backslashes, both as it is and percent-decoded.
func safeNext(next string) string {
	decoded, err := url.PathUnescape(next)
	if err != nil || !localPath(next) || !localPath(decoded) || strings.HasPrefix(decoded, "/login") {
		return "/"
	}
	return next
}

// localPath reports whether p starts with exactly one '/' and holds no
// ASCII control characters and no backslashes.
func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return false
	}
	return !strings.ContainsFunc(p, func(c rune) bool { return c < 0x20 || c == 0x7f || c == '\\' })
}

func newToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func equal(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
