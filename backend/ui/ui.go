package ui

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/backend/sso"
)

// Options configure the dashboard. Zero values select the defaults.
type Options struct {
	// ExternalURL is the base URL under which people reach the server,
	// e.g. https://rezuscloud.example.com behind a TLS-terminating proxy.
	// An https scheme marks the session cookie Secure; so does a request
	// that arrives over TLS.
	ExternalURL string
	// Origin is where the manifests come from; a repository on GitHub,
	// GitLab, Gitea or Forgejo lets problems link to their file and line.
	Origin backend.Origin
	// Logger receives login failures and render errors. Default: none.
	Logger *slog.Logger
	// Now is the clock of relative ages. Default time.Now.
	Now func() time.Time
	// SSO signs people in with the organisation's OpenID Connect
	// provider (see sso.go); nil without single sign-on.
	SSO *sso.Client
}

// Serve mounts the dashboard on srv at "/": every path no other handler
// of srv claims. Call it before srv runs.
func Serve(srv *backend.Server, opts Options) error {
	h, err := New(srv, opts)
	if err != nil {
		return err
	}
	srv.HandleBrowser("/", h)
	return nil
}

// handler serves the dashboard's pages, fragments, forms and assets.
type handler struct {
	srv    *backend.Server
	opts   Options
	log    *slog.Logger
	secure bool // cookies are Secure
	forge  forge
	mux    *http.ServeMux
	cache  summaryCache
	// backupLists keeps the tenants' listings of backups.
	backupLists backupLists
	sso         ssoSessions
}

// New returns the dashboard's handler for srv, to be mounted with
// Server.HandleBrowser at "/" (Serve does both).
func New(srv *backend.Server, opts Options) (http.Handler, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{srv: srv, opts: opts, log: log, forge: forgeOf(opts.Origin.Repo)}
	if opts.ExternalURL != "" {
		u, err := url.Parse(opts.ExternalURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("external URL %q: want http:// or https:// and a host", opts.ExternalURL)
		}
		h.secure = u.Scheme == "https"
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.page(h.overview))
	m.HandleFunc("GET /tenants/{tenant}", h.page(h.tenant))
	m.HandleFunc("GET /tenants/{tenant}/machines/{machine}", h.page(h.machine))
	m.HandleFunc("GET /commits", h.page(h.commits))
	m.HandleFunc("GET /commits/{commit}", h.page(h.commit))
	m.HandleFunc("GET /login", h.loginPage)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("POST /logout", h.logout)
	h.routeSSO(m)
	m.HandleFunc("GET /assets/{name}", serveAsset)
	m.HandleFunc("/", h.notFound)
	h.mux = m
	return h, nil
}

// csp allows nothing but this server's own scripts, styles, images and
// connections, and no inline code of any kind.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		hd.Set("Allow", "GET, HEAD, POST")
		h.fail(w, r, http.StatusMethodNotAllowed, "The dashboard is read-only: change the manifests in git.")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// view is what one page needs to render: the layout's data and the page's
// own (Body).
type view struct {
	Title string
	// Nav names the active entry of the navigation.
	Nav    string
	User   *backend.Identity // nil without a tokens file
	CSRF   string            // the session's, for the logout form
	Admin  bool              // the user may download secrets
	Edit   bool              // the user may read logs
	Assets assetURLs
	Now    time.Time
	// Watch lists the watch endpoints (without sse=true) that the
	// script follows; RV is the store's resourceVersion the page shows.
	Watch []string
	RV    uint64
	Body  any
}

// pageFunc fills a view for a request, or returns an error: an
// *api.Error for a 404 and the like, anything else for a 500.
type pageFunc func(r *http.Request, v *view) (tmpl string, err error)

// page serves a page, or with ?part=A,B only those parts of it, for the
// live script. Visitors without a session are sent to the login page.
func (h *handler) page(fill pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := backend.IdentityFrom(r.Context())
		parts := r.URL.Query().Get("part")
		if !ok {
			h.needLogin(w, r, parts != "")
			return
		}
		v := &view{Assets: assets.urls, Now: h.opts.Now().UTC(), Admin: id.Role >= backend.RoleAdmin, Edit: id.Role >= backend.RoleEdit}
		if !h.srv.Tokens().Open() {
			v.User = &id
			if sess, ok := h.srv.Sessions().FromRequest(r); ok {
				v.CSRF = sess.CSRF
			}
		}
		tmpl, err := fill(r, v)
		var ae *api.Error
		switch {
		case errors.As(err, &ae):
			h.fail(w, r, ae.Code, ae.Message)
			return
		case err != nil:
			h.log.Error("dashboard page", "path", r.URL.Path, "err", err)
			h.fail(w, r, http.StatusInternalServerError, "The page could not be read from the store; the server log has the details.")
			return
		}
		var names []string
		if parts != "" {
			names = strings.Split(parts, ",")
		}
		h.render(w, r, http.StatusOK, tmpl, v, names)
	}
}

// render writes the page tmpl, or only its parts named in parts.
func (h *handler) render(w http.ResponseWriter, r *http.Request, code int, tmpl string, v *view, parts []string) {
	var b bytes.Buffer
	if err := pages.execute(&b, tmpl, v, parts); err != nil {
		h.log.Error("render dashboard page", "page", tmpl, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("The page could not be rendered; the server log has the details.\n"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if v.RV != 0 {
		w.Header().Set("X-Resource-Version", fmt.Sprint(v.RV))
	}
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// fail answers with an error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	v := &view{Title: http.StatusText(code), Assets: assets.urls, Now: h.opts.Now().UTC(),
		Body: errorPage{Code: code, Status: http.StatusText(code), Message: msg}}
	if id, ok := backend.IdentityFrom(r.Context()); ok && !h.srv.Tokens().Open() {
		v.User = &id
		if sess, ok := h.srv.Sessions().FromRequest(r); ok {
			v.CSRF = sess.CSRF
		}
	}
	h.render(w, r, code, "error", v, nil)
}

type errorPage struct {
	Code    int
	Status  string
	Message string
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
}

func notFound(format string, args ...any) error {
	return api.Errorf(http.StatusNotFound, format, args...)
}
