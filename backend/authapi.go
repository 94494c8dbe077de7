package backend

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// The paths of the auth endpoints.
const (
	LoginPath  = APIPrefix + "auth/login"
	LogoutPath = APIPrefix + "auth/logout"
	WhoamiPath = APIPrefix + "auth/whoami"
)

// loginTokenPrefix starts the bearer tokens of logins, so that the check
// of login tokens knows the others at a glance.
const loginTokenPrefix = "rzl_"

// maxLoginBody bounds the body of a login.
const maxLoginBody = 8 << 10

// The bounds of the login tokens alive at once: per user, whose next
// login ends their oldest, and in all, past which a login ends the
// oldest token of the user who holds the most.
const (
	loginTokensPerUser = 32
	maxLoginTokens     = 10000
)

// localLogins are the local users (ServeUsers) and the bearer tokens of
// their logins. The tokens live in this process only: a restart ends
// them, as it ends the dashboard's sessions. Only their SHA-256 digests
// are kept. On replicas the digests are also shared (SharedTokens),
// bound to the replica's lease, so that every live replica accepts a
// login's token and a logout anywhere ends it everywhere.
type localLogins struct {
	users atomic.Pointer[Users]

	mu     sync.Mutex
	tokens map[[sha256.Size]byte]*loginToken
	// byUser holds each user's live tokens, oldest first.
	byUser map[string][][sha256.Size]byte
}

type loginToken struct {
	user string
	// hash is the user's password hash at login: a new password ends
	// the token.
	hash    string
	expires time.Time
	// unshare removes the token's shared record; nil without one.
	unshare func()
}

// ServeUsers lets the local users of u log in (POST /api/v1/auth/login),
// with a session or a bearer token, and closes the server: from now on
// every request needs a credential (Tokens.Require).
func (s *Server) ServeUsers(u *Users) {
	if s.local.users.Swap(u) == nil {
		s.tokens.AddCheck(s.checkLoginToken)
	}
}

// Users returns the local users (ServeUsers), or nil.
func (s *Server) Users() *Users { return s.local.users.Load() }

// authRoutes mounts the login, logout and whoami endpoints.
func (s *Server) authRoutes() {
	s.mount("POST "+LoginPath, http.HandlerFunc(s.login))
	s.mount("POST "+LogoutPath, http.HandlerFunc(s.logout))
	s.Handle("GET "+WhoamiPath, http.HandlerFunc(s.whoami))
}

// errNoUsers answers a login on a server without local users.
var errNoUsers = errors.New("this server has no local users: its operator starts it with --users-file")

// loginUser checks a local user's password for a client at addr (a
// RemoteAddr) within the login limits: per address, per user name after
// failed logins, and per user for successful ones. It audits the login or
// the failure, naming the user and the address, never the password.
func (s *Server) loginUser(addr, name, password, via string) (userEntry, error) {
	users := s.Users()
	if users == nil {
		return userEntry{}, errNoUsers
	}
	limits, now, client := s.sessions.limits, s.sessions.now(), clientKey(addr)
	refuse := func(err error) (userEntry, error) {
		why := err.Error()
		if le := (*LoginLimitError)(nil); errors.As(err, &le) {
			why = le.Why
		}
		s.AuditRefused("failed login", client, api.Shorten(name)+": "+why, "user", api.Shorten(name), "source", string(SourceLocal), "remote", addr, "via", via, "reason", err.Error())
		return userEntry{}, err
	}
	if err := limits.admit(client, now); err != nil {
		return refuse(err)
	}
	if err := limits.admitUser(name, now); err != nil {
		return refuse(err)
	}
	e, ok := users.verify(name, password)
	if !ok {
		return refuse(limits.failedUser(client, name, now, errBadCredentials))
	}
	limits.succeededUser(name)
	if err := limits.admitToken(string(SourceLocal)+":"+name, now); err != nil {
		return refuse(err)
	}
	s.Audit().Info("login", append(e.identity().Who(), "role", e.role.String(), "remote", addr, "via", via)...)
	return e, nil
}

// UserSession logs a local user in for a client at addr, as loginUser
// does, and starts a dashboard session for them. The session follows the
// users file: it takes a user's new role, and ends when the user leaves
// the file or their password changes. via names the way in for the
// audit log ("dashboard", "api").
func (s *Server) UserSession(addr, name, password, via string) (string, Session, error) {
	e, err := s.loginUser(addr, name, password, via)
	if err != nil {
		return "", Session{}, err
	}
	users := s.Users()
	value, sess := s.sessions.Start(e.identity(), func(time.Time) (Identity, error) {
		role, ok := users.current(e.name, e.hash)
		if !ok {
			return Identity{}, errBadCredentials
		}
		id := e.identity()
		id.Role = role
		return id, nil
	}, Elsewhere{Password: passwordDigest(e.hash)})
	return value, sess, nil
}

// mintLoginToken makes a bearer token for the user of e that lasts as
// long as a session.
func (s *Server) mintLoginToken(e userEntry) (string, time.Time) {
	secret := loginTokenPrefix + strings.TrimPrefix(newSecret(), "rzc_")
	digest := sha256.Sum256([]byte(secret))
	now := s.sessions.now()
	t := &loginToken{user: e.name, hash: e.hash, expires: now.Add(s.sessions.TTL())}
	l := &s.local
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tokens == nil {
		l.tokens, l.byUser = map[[sha256.Size]byte]*loginToken{}, map[string][][sha256.Size]byte{}
	}
	if own := l.byUser[e.name]; len(own) >= loginTokensPerUser {
		l.dropLocked(own[0])
	}
	if len(l.tokens) >= maxLoginTokens {
		l.pruneLocked(now)
	}
	if len(l.tokens) >= maxLoginTokens {
		var most [][sha256.Size]byte
		for _, ds := range l.byUser {
			if len(ds) > len(most) {
				most = ds
			}
		}
		l.dropLocked(most[0])
	}
	if shared := s.tokens.sharedStore(); shared != nil {
		// Without the record the token still works on this replica.
		id := e.identity()
		id.Expires = t.expires
		if remove, err := shared.Share(digest, id); err == nil {
			t.unshare = remove
		}
	}
	l.tokens[digest] = t
	l.byUser[e.name] = append(l.byUser[e.name], digest)
	return secret, t.expires
}

func (l *localLogins) dropLocked(d [sha256.Size]byte) {
	t, ok := l.tokens[d]
	if !ok {
		return
	}
	delete(l.tokens, d)
	if t.unshare != nil {
		go t.unshare()
	}
	ds := l.byUser[t.user]
	for i := range ds {
		if ds[i] == d {
			ds = append(ds[:i:i], ds[i+1:]...)
			break
		}
	}
	if len(ds) == 0 {
		delete(l.byUser, t.user)
	} else {
		l.byUser[t.user] = ds
	}
}

func (l *localLogins) pruneLocked(now time.Time) {
	for d, t := range l.tokens {
		if !now.Before(t.expires) {
			l.dropLocked(d)
		}
	}
}

// checkLoginToken is the CredentialCheck of login tokens: a bearer token
// of a live login of a user who is still in the users file with the same
// password, with the user's current role.
func (s *Server) checkLoginToken(name, secret string) (Identity, error) {
	if name != "" || !strings.HasPrefix(secret, loginTokenPrefix) {
		return Identity{}, ErrNotMine
	}
	d := sha256.Sum256([]byte(secret))
	now := s.sessions.now()
	l := &s.local
	l.mu.Lock()
	t, ok := l.tokens[d]
	var tok loginToken
	if ok {
		tok = *t
		if !now.Before(t.expires) {
			l.dropLocked(d)
		}
	}
	l.mu.Unlock()
	shared := s.tokens.sharedStore()
	switch {
	case !ok && shared != nil:
		return s.checkSharedLoginToken(shared, d, now)
	case !ok:
		return Identity{}, errUnknownLogin
	case !now.Before(tok.expires):
		id := Identity{Name: tok.user, Source: SourceLocal, Expires: tok.expires}
		s.AuditRefused("expired credential", id.Name, string(id.Source), append(id.Who(), "expiredAt", tok.expires.UTC().Format(time.RFC3339))...)
		return Identity{}, fmt.Errorf("login token of %s expired at %s; log in again", tok.user, tok.expires.UTC().Format(time.RFC3339))
	case tok.unshare != nil && !sharedLive(shared, d):
		// A logout through another replica, or this replica's lease
		// ended.
		s.revokeLocal(d)
		return Identity{}, errUnknownLogin
	}
	role, ok := s.Users().current(tok.user, tok.hash)
	if !ok {
		l.mu.Lock()
		l.dropLocked(d)
		l.mu.Unlock()
		return Identity{}, fmt.Errorf("login token of %s ended: the user left the users file or their password changed; log in again", tok.user)
	}
	return Identity{Name: tok.user, Role: role, Source: SourceLocal, Expires: tok.expires}, nil
}

// errUnknownLogin refuses a login token that no live login has.
var errUnknownLogin = errors.New("unknown login token: it was revoked by a logout, or the server (or the replica that made it) restarted since the login; log in again")

// checkSharedLoginToken checks a login token that another replica made:
// its shared record must be live and unexpired, and its user still in
// the users file, with the role the file gives them now.
func (s *Server) checkSharedLoginToken(shared SharedTokens, d [sha256.Size]byte, now time.Time) (Identity, error) {
	id, ok := shared.Find(d)
	switch {
	case !ok || id.Source != SourceLocal:
		return Identity{}, errUnknownLogin
	case !now.Before(id.Expires):
		s.AuditRefused("expired credential", id.Name, string(id.Source), append(id.Who(), "expiredAt", id.Expires.UTC().Format(time.RFC3339))...)
		return Identity{}, fmt.Errorf("login token of %s expired at %s; log in again", id.Name, id.Expires.UTC().Format(time.RFC3339))
	}
	role, ok := s.Users().role(id.Name)
	if !ok {
		return Identity{}, fmt.Errorf("login token of %s ended: the user left the users file; log in again", id.Name)
	}
	id.Role = role
	return id, nil
}

// sharedLive reports whether the shared record of a login token this
// replica made is still there: a logout through another replica removes
// it.
func sharedLive(shared SharedTokens, d [sha256.Size]byte) bool {
	_, ok := shared.Find(d)
	return ok
}

// revokeLocal forgets this replica's login token of digest d.
func (s *Server) revokeLocal(d [sha256.Size]byte) (loginToken, bool) {
	l := &s.local
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.tokens[d]
	if !ok {
		return loginToken{}, false
	}
	tok := *t
	t.unshare = nil // the caller removes the record
	l.dropLocked(d)
	return tok, true
}

// revokeLoginToken ends the login token secret, on every replica, and
// reports whether it was live.
func (s *Server) revokeLoginToken(secret string) (loginToken, bool) {
	d := sha256.Sum256([]byte(secret))
	t, ok := s.revokeLocal(d)
	shared := s.tokens.sharedStore()
	if shared == nil {
		return t, ok
	}
	if !ok {
		id, found := shared.Find(d)
		if !found || id.Source != SourceLocal {
			return loginToken{}, false
		}
		t, ok = loginToken{user: id.Name, expires: id.Expires}, true
	}
	if err := shared.Revoke(d); err != nil {
		s.log.Warn("a logout is not shared with the other replicas: they accept the login's token until it expires or this replica's lease ends", "user", t.user, "err", err)
	}
	return t, ok
}

// loginRequest is the body of POST /api/v1/auth/login.
type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// Session asks for the dashboard's session cookie instead of a
	// bearer token.
	Session bool `json:"session"`
}

// loginAnswer is the answer to a login.
type loginAnswer struct {
	Token     string    `json:"token,omitempty"`
	ExpiresAt time.Time `json:"expiresAt"`
	User      string    `json:"user"`
	Role      string    `json:"role"`
	Source    Source    `json:"source"`
}

// WhoAmI is the answer of GET /api/v1/auth/whoami.
type WhoAmI struct {
	User    string `json:"user"`
	Role    string `json:"role"`
	Source  Source `json:"source"`
	Subject string `json:"subject,omitempty"`
	Email   string `json:"email,omitempty"`
	// ExpiresAt is when the credential (or the session) ends; absent for
	// one that does not.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// login answers POST /api/v1/auth/login: a JSON body {username, password,
// session}. It needs no credential. Only application/json is accepted, so
// that a form on another site cannot log a browser in.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.Users() == nil {
		api.WriteError(w, api.Errorf(http.StatusNotFound, "%v", errNoUsers))
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		api.WriteError(w, api.Errorf(http.StatusUnsupportedMediaType, "a login is a JSON body {\"username\": …, \"password\": …} with Content-Type: application/json"))
		return
	}
	var req loginRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLoginBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "login body: %v", err))
		return
	}
	if req.Username == "" || req.Password == "" {
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "login body: username and password are required"))
		return
	}
	if !req.Session {
		e, err := s.loginUser(r.RemoteAddr, req.Username, req.Password, "api")
		if err != nil {
			writeLoginError(w, err)
			return
		}
		token, expires := s.mintLoginToken(e)
		w.Header().Set("Cache-Control", "no-store")
		api.WriteJSON(w, http.StatusOK, loginAnswer{Token: token, ExpiresAt: expires.UTC(), User: e.name, Role: e.role.String(), Source: SourceLocal})
		return
	}
	value, sess, err := s.UserSession(r.RemoteAddr, req.Username, req.Password, "api session")
	if err != nil {
		writeLoginError(w, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: value, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, Expires: sess.Expires,
		MaxAge: int(sess.Expires.Sub(s.sessions.now()).Seconds())})
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, loginAnswer{ExpiresAt: sess.Expires.UTC(), User: sess.Identity.Name, Role: sess.Identity.Role.String(), Source: SourceLocal})
}

// writeLoginError answers a refused login: 401 for a wrong user name or
// password, 429 when a limit holds, both with Retry-After when the client
// must wait.
func writeLoginError(w http.ResponseWriter, err error) {
	var limit *LoginLimitError
	switch {
	case errors.As(err, &limit):
		w.Header().Set("Retry-After", strconv.Itoa(limit.RetryAfter()))
		code, msg := http.StatusTooManyRequests, "There were "+limit.Error()
		if limit.Invalid {
			code, msg = http.StatusUnauthorized, "invalid user name or password, and there were "+limit.Error()
		}
		api.WriteError(w, api.Errorf(code, "%s", msg))
	case errors.Is(err, errBadCredentials):
		api.WriteError(w, api.Errorf(http.StatusUnauthorized, "invalid user name or password"))
	default:
		api.WriteError(w, api.Errorf(http.StatusNotFound, "%v", err))
	}
}

// logout answers POST /api/v1/auth/logout: it revokes the login token the
// request carries as a bearer, or else ends the session of its cookie.
// Tokens of the tokens file do not log out: they end when their line
// leaves the file.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		secret = strings.TrimSpace(secret)
		if strings.EqualFold(scheme, "Bearer") && strings.HasPrefix(secret, loginTokenPrefix) {
			if t, ok := s.revokeLoginToken(secret); ok {
				s.Audit().Info("logout", append(Identity{Name: t.user, Source: SourceLocal}.Who(), "remote", r.RemoteAddr, "via", "api")...)
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		if _, err := identify(s.tokens, r); err != nil {
			api.WriteError(w, api.Errorf(http.StatusUnauthorized, "%v", err))
			return
		}
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "this credential does not log out: only a login's bearer token or a session does; a token of the tokens file ends when its line leaves the file"))
		return
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		api.WriteError(w, api.Errorf(http.StatusUnauthorized, "no credential to log out: send the login's bearer token or the session cookie"))
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !sameHost(o, r.Host) {
		api.WriteError(w, api.Errorf(http.StatusForbidden, "a logout from another site is refused"))
		return
	}
	sess, ok := s.sessions.Check(c.Value)
	s.sessions.Logout(c.Value)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	if !ok {
		api.WriteError(w, api.Errorf(http.StatusUnauthorized, "the session had already ended"))
		return
	}
	s.Audit().Info("logout", append(sess.Identity.Who(), "remote", r.RemoteAddr, "via", "api session")...)
	w.WriteHeader(http.StatusNoContent)
}

// sameHost reports whether the Origin header origin names host.
func sameHost(origin, host string) bool {
	_, rest, ok := strings.Cut(origin, "://")
	return ok && rest == host
}

// whoami answers GET /api/v1/auth/whoami with the caller's identity,
// whichever way they came in.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	id, _ := IdentityFrom(r.Context())
	expires := id.Expires
	if r.Header.Get("Authorization") == "" {
		if sess, ok := s.sessions.FromRequest(r); ok {
			expires = sess.Expires
		}
	}
	src := id.Source
	if src == "" {
		src = SourceToken
	}
	ans := WhoAmI{User: id.Name, Role: id.Role.String(), Source: src, Subject: id.Subject, Email: id.Email}
	if !expires.IsZero() {
		e := expires.UTC()
		ans.ExpiresAt = &e
	}
	w.Header().Set("Cache-Control", "no-store")
	api.WriteJSON(w, http.StatusOK, ans)
}
