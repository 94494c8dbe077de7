package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// Defaults of Config.
const (
	// DefaultListen is the address the server listens on.
	DefaultListen = "127.0.0.1:8080"
	// DefaultShutdownTimeout is how long a shutdown waits for requests in
	// flight.
	DefaultShutdownTimeout = 30 * time.Second
)

// Config configures a Server. Zero values select the defaults.
type Config struct {
	// DataDir holds the store, which NewServer opens with the bbolt
	// engine (see bolt.Open), unless Store is given. Required.
	DataDir string
	// Store is an open store the server uses instead of opening one in
	// DataDir, such as the etcd engine's. The server closes it when it
	// closes; when NewServer fails, it is left open. Default: the bbolt
	// engine's, in DataDir.
	Store store.Store
	// Listen is the TCP address to serve on. Default DefaultListen.
	Listen string
	// TokensFile is the tokens file (see LoadTokens). Without one every
	// request is allowed as an admin, and the server refuses to listen on
	// anything but loopback.
	TokensFile string
	// MaxStateBytes, StateHistory and StaleLockAge are the state
	// backend's StateOptions MaxBytes, History and StaleLockAge.
	MaxStateBytes int64
	StateHistory  int
	StaleLockAge  time.Duration
	// ShutdownTimeout bounds how long Run waits for requests in flight
	// after its context ends. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// BodyTimeout is how long a request body may take to arrive, from
	// the start of its request; a slower one gets 408 and its connection
	// is closed. Requests without a body (watches) have no such limit.
	// Default DefaultBodyTimeout.
	BodyTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request before the server closes it. Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// BodyMemory is how many bytes of request bodies all requests
	// together may hold at once; a body that would need more waits for
	// them, until its BodyTimeout, then gets 503 with Retry-After. It
	// must be at least MaxStateBytes. Default: DefaultBodyMemory or twice
	// MaxStateBytes, whichever is more.
	BodyMemory int64
	// Version is what /version reports. Default "dev".
	Version string
	// Logger receives the request log and server events. Default: none.
	Logger *slog.Logger
	// Origin names the repository the manifests come from; the read-only
	// API quotes it when it refuses a write. Default: a generic message.
	Origin Origin

	// EventHistory is how many resource changes the server keeps in the
	// store for watches to resume from; the latest of them, up to
	// DefaultHistoryBytes of frames, are also kept in memory. Default
	// store.DefaultEventHistory.
	EventHistory int
	// WatchBuffer is how many commits' events a watch may have waiting
	// before it is cut off. Default DefaultWatchBuffer.
	WatchBuffer int
	// WatchHeartbeat is how often an idle watch gets a heartbeat. Default
	// DefaultWatchHeartbeat.
	WatchHeartbeat time.Duration

	// SessionTTL is how long a dashboard session lasts. Default
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// SessionClock is the clock of dashboard sessions, of the limits
	// on logins and of token expiries and last uses. Default time.Now;
	// tests move it.
	SessionClock func() time.Time
	// LastUsedFlush is how often the last uses of tokens are written to
	// the store. Default DefaultLastUsedFlush.
	LastUsedFlush time.Duration
}

// Server is the rezuscloud HTTP server: the state backend, health and
// version endpoints, and whatever else is mounted with Handle, behind
// token authentication and a request log. NewServer opens the store; Run
// serves until its context ends and then closes it.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	tokens   *Tokens
	sessions *Sessions
	state    *StateHandler
	hub      *Hub
	api      *resourceAPI
	mux      *http.ServeMux
	// backups answer the backup endpoints; nil without a backup store
	// (see ServeBackups).
	backups atomic.Pointer[backupService]
	// notifications answer the notification endpoint; nil without
	// notifications (see ServeNotifications).
	notifications atomic.Pointer[notificationService]
	http          *http.Server
	// lastUsed writes the last uses of tokens to the store.
	lastUsed *lastUsedFlusher
	// local holds the local users and their logins' tokens (authapi.go).
	local localLogins
	// refused counts repeated refusals for the audit log (refusals.go).
	refused *refusals

	ln       net.Listener
	stopping atomic.Bool

	readyMu sync.Mutex
	ready   []readyCheck

	// allow holds, per path mounted with a method ("GET /x"), the methods
	// mounted on it; see mount.
	allowMu sync.Mutex
	allow   map[string][]string

	closeOnce sync.Once
	closeErr  error
}

type readyCheck struct {
	name string
	fn   func(context.Context) error
}

// NewServer opens the store in cfg.DataDir (or takes cfg.Store) and the
// tokens file, and builds the routes. It does not listen yet.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tokens := NewTokens()
	if cfg.TokensFile != "" {
		var err error
		if tokens, err = LoadTokens(cfg.TokensFile); err != nil {
			return nil, err
		}
	}
	st, err := cfg.store()
	if err != nil {
		return nil, err
	}
	hub := NewHub(HubOptions{History: cfg.EventHistory, Buffer: cfg.WatchBuffer, Logger: log})
	if err := hub.Attach(st); err != nil {
		if cfg.Store == nil {
			st.Close()
		}
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      log,
		store:    st,
		hub:      hub,
		tokens:   tokens,
		sessions: newSessions(tokens, cfg.SessionTTL),
		refused:  newRefusals(),
		mux:      http.NewServeMux(),
		state: NewStateHandler(st, StateOptions{
			MaxBytes:     cfg.MaxStateBytes,
			History:      cfg.StateHistory,
			StaleLockAge: cfg.StaleLockAge,
			Logger:       log,
		}),
	}
	if cfg.SessionClock != nil {
		s.sessions.now = cfg.SessionClock
		tokens.setClock(cfg.SessionClock)
	}
	tokens.setAudit(s.Audit, s.refused)
	s.routes()
	s.lastUsed = startLastUsedFlusher(st, tokens, cfg.LastUsedFlush, log)
	// No ReadTimeout or WriteTimeout: they would end watches, which last
	// for hours. Bodies have their own deadline (bodyLimits).
	s.http = &http.Server{
		Handler:           newBodyLimits(cfg.BodyTimeout, cfg.BodyMemory).wrap(LogRequests(log, s.mux)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Watches never go idle by themselves: end them when shutdown starts.
	s.http.RegisterOnShutdown(hub.Close)
	return s, nil
}

// store returns cfg.Store, or else the bbolt engine's store in
// cfg.DataDir, opened.
func (cfg *Config) store() (store.Store, error) {
	if cfg.Store != nil {
		return cfg.Store, nil
	}
	return bolt.Open(cfg.DataDir, &bolt.Options{EventHistory: cfg.EventHistory})
}

// withDefaults fills in the defaults of cfg and checks what depends on
// more than one setting.
func (cfg *Config) withDefaults() error {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.WatchHeartbeat <= 0 {
		cfg.WatchHeartbeat = DefaultWatchHeartbeat
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.LastUsedFlush <= 0 {
		cfg.LastUsedFlush = DefaultLastUsedFlush
	}
	maxState := cfg.MaxStateBytes
	if maxState <= 0 {
		maxState = DefaultMaxStateBytes
	}
	if cfg.BodyMemory <= 0 {
		cfg.BodyMemory = max(DefaultBodyMemory, 2*maxState)
	}
	if cfg.BodyMemory < maxState {
		return fmt.Errorf("body memory of %d bytes is less than the largest state a POST may send (%d bytes): raise it or lower the state limit", cfg.BodyMemory, maxState)
	}
	return nil
}

// routes mounts the server's own endpoints, the state backend, the API and
// its backup endpoints.
func (s *Server) routes() {
	s.mount("GET /healthz", http.HandlerFunc(s.healthz))
	s.mount("GET /readyz", http.HandlerFunc(s.readyz))
	s.mount("GET /version", http.HandlerFunc(s.version))
	s.Handle(StatePrefix, s.state)
	s.Handle(VersionsPrefix, s.state)
	s.api = newResourceAPI(s.store, s.hub, s.cfg.WatchHeartbeat, s.log, s.cfg.Origin, s.cfg.Version)
	s.api.routeHistory()
	s.Handle(APIPrefix, s.api)
	s.serveBackups()
	s.serveNotifications()
	s.serveTokens()
	s.authRoutes()
	if b, ok := s.store.(store.Backuper); ok {
		s.serveStoreBackup("GET "+StoreBackupPath, b)
	} else {
		s.refuseStoreBackup("GET " + StoreBackupPath)
	}
}

// Handle mounts h at pattern (http.ServeMux syntax) behind authentication:
// h finds the caller with IdentityFrom. A pattern with a method, such as
// "GET /metrics", makes its path answer every other method with 405 and
// an Allow header that names the methods mounted there (GET brings HEAD);
// a pattern without one leaves methods to h.
//
// Reads of the API (GET and HEAD under APIPrefix) also accept the session
// cookie of the dashboard, so that its pages can call the API and its
// watches as the logged-in user.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mount(pattern, s.authenticate(h))
}

func (s *Server) authenticate(h http.Handler) http.Handler {
	return authenticate(s.tokens, s.sessions, s.log, h)
}

// HandleBrowser mounts h at pattern for pages that people open in a
// browser: h finds the caller with IdentityFrom, which reports the
// session of the request's cookie (see Sessions), or Anonymous on a server
// without a tokens file, and nothing else. h answers requests without an
// identity itself, with a login page for instance. Methods are handled as
// with Handle.
func (s *Server) HandleBrowser(pattern string, h http.Handler) {
	s.mount(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := Anonymous, s.tokens.open()
		if !ok {
			var sess Session
			if sess, ok = s.sessions.FromRequest(r); ok {
				id = sess.Identity
			}
		}
		if ok {
			if rl := requestLogFrom(r.Context()); rl != nil {
				rl.token = id.Name
			}
			r = r.WithContext(WithIdentity(r.Context(), id))
		}
		h.ServeHTTP(w, r)
	}))
}

// Sessions returns the dashboard's sessions.
func (s *Server) Sessions() *Sessions { return s.sessions }

// Routes reports whether a handler of its own is mounted for a request of
// method to path, beside the catch-all mounts of the API and of "/": the
// dashboard shows what links to such a handler only when it is there.
func (s *Server) Routes(method, path string) bool {
	r, err := http.NewRequest(method, path, nil)
	if err != nil {
		return false
	}
	_, p := s.mux.Handler(r)
	if _, path, ok := strings.Cut(p, " "); ok {
		p = path
	}
	return p != "" && p != "/" && p != APIPrefix
}

// HandleUnauthenticated mounts h at pattern without token authentication,
// for endpoints that check their own credentials, such as signed webhooks.
// Methods are handled as with Handle.
func (s *Server) HandleUnauthenticated(pattern string, h http.Handler) {
	s.mount(pattern, h)
}

// mount registers h at pattern and, for a pattern with a method, the 405
// answer of its path for the methods not mounted there. The 405 comes
// before authentication: it tells nothing about the resource.
func (s *Server) mount(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		return
	}
	path = strings.TrimSpace(path)
	s.allowMu.Lock()
	defer s.allowMu.Unlock()
	if s.allow == nil {
		s.allow = map[string][]string{}
	}
	if _, seen := s.allow[path]; !seen {
		s.mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			allow := s.allowed(path)
			w.Header().Set("Allow", allow)
			api.WriteError(w, api.Errorf(http.StatusMethodNotAllowed, "%s %s: this endpoint serves %s", r.Method, r.URL.Path, allow))
		}))
	}
	s.allow[path] = append(s.allow[path], method)
}

// allowed returns the Allow header of a path mounted with methods.
func (s *Server) allowed(path string) string {
	s.allowMu.Lock()
	methods := slices.Clone(s.allow[path])
	s.allowMu.Unlock()
	if slices.Contains(methods, http.MethodGet) {
		methods = append(methods, http.MethodHead)
	}
	slices.Sort(methods)
	return strings.Join(slices.Compact(methods), ", ")
}

// AddReadyCheck adds a check that /readyz runs; the server is ready when
// every check returns nil.
func (s *Server) AddReadyCheck(name string, fn func(context.Context) error) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	s.ready = append(s.ready, readyCheck{name, fn})
}

// Handler returns the server's whole handler, request log included, for
// tests and for embedding.
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Store returns the server's store: Config.Store, or else the bbolt
// engine's *bolt.Store, whose ReleaseMapped the server's owner may call.
func (s *Server) Store() store.Store { return s.store }

// Tokens returns the server's tokens, for minting ephemeral ones.
func (s *Server) Tokens() *Tokens { return s.tokens }

// Hub returns the server's event hub, which feeds the watches.
func (s *Server) Hub() *Hub { return s.hub }

// WatchSubscribers returns how many watches are open, for a gauge.
func (s *Server) WatchSubscribers() int { return s.hub.Subscribers() }

// SetAudit sets the audit log, which records every force-unlock of the
// state backend and every download of a copy of the store (without it,
// the server's log does). Call it before Run.
func (s *Server) SetAudit(audit *slog.Logger) { s.state.opts.Audit = audit }

// StateHandler returns the state backend handler, without authentication.
func (s *Server) StateHandler() *StateHandler { return s.state }

// Listen binds the configured address. Without a tokens file it refuses
// any address that is not loopback.
func (s *Server) Listen() error {
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if s.tokens.Open() {
		if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
			ln.Close()
			return fmt.Errorf("no tokens file: refusing to listen on %s, which is not a loopback address; give a tokens file (--tokens-file, REZUSCLOUD_TOKENS_FILE) or listen on 127.0.0.1", s.cfg.Listen)
		}
		s.log.Warn("no tokens file: every request is allowed as admin; listening on loopback only", "addr", ln.Addr().String())
	}
	s.ln = ln
	return nil
}

// Addr returns the address the server listens on, after Listen.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL returns the server's base URL, after Listen.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Run serves (listening first if Listen was not called) until ctx ends,
// then shuts down gracefully: it stops accepting, lets requests in flight
// finish (up to ShutdownTimeout) and closes the store.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		s.Close()
		return err
	}
	s.log.Info("serving", "addr", s.Addr(), "data", s.cfg.DataDir, "version", s.cfg.Version)
	served := make(chan error, 1)
	go func() { served <- s.http.Serve(s.ln) }()
	var serveErr error
	select {
	case err := <-served:
		serveErr = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		s.stopping.Store(true)
		s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		err := s.http.Shutdown(sctx)
		cancel()
		if err != nil {
			serveErr = fmt.Errorf("shutdown: %w", err)
			s.http.Close()
		}
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) && serveErr == nil {
			serveErr = fmt.Errorf("serve: %w", err)
		}
	}
	if err := s.Close(); err != nil && serveErr == nil {
		serveErr = err
	}
	s.log.Info("stopped")
	return serveErr
}

// Close closes the store. Run calls it; call it yourself only when Run
// never ran.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.lastUsed.Close()
		s.refused.close()
		s.hub.Close()
		s.closeErr = s.store.Close()
	})
	return s.closeErr
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		api.WriteError(w, api.Errorf(http.StatusServiceUnavailable, "shutting down"))
		return
	}
	s.readyMu.Lock()
	checks := s.ready
	s.readyMu.Unlock()
	for _, c := range checks {
		if err := c.fn(r.Context()); err != nil {
			api.WriteError(w, api.Errorf(http.StatusServiceUnavailable, "%s: %v", c.name, err))
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// VersionInfo is the body of /version.
type VersionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	api.WriteJSON(w, http.StatusOK, VersionInfo{
		Version:   s.cfg.Version,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	})
}
