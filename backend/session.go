package backend

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SessionCookie is the name of the cookie that carries a dashboard
// session.
const SessionCookie = "rezuscloud_session"

// DefaultSessionTTL is how long a dashboard session lasts unless
// Config.SessionTTL says otherwise.
const DefaultSessionTTL = 12 * time.Hour

// sessionsPerToken bounds the sessions of one token: its next login ends
// its oldest session.
const sessionsPerToken = 32

// maxSessions bounds the sessions alive at once. A login past it ends the
// oldest session of the token that holds the most, so that no token can
// fill it and shut the others out.
const maxSessions = 10000

// Sessions are the logins of the dashboard. A browser logs in once with a
// token; the server keeps the session and hands the browser a cookie that
// names it, signed with a key that lives only in this process, so that the
// browser never sends the token again. A session ends when it expires,
// when it is logged out (the server forgets it, whatever the browser
// keeps), when the server restarts (unless it is shared: Share), when its
// token leaves the tokens file, and when it is the oldest of its token's
// sessionsPerToken and the token logs in again; its role is the token's
// current one. Logins are rate-limited per client address and per token
// (loginLimits). Sessions is safe for concurrent use.
type Sessions struct {
	tokens *Tokens
	ttl    time.Duration
	key    [32]byte
	now    func() time.Time
	limits *loginLimits

	// shared, when set, keeps the sessions where the other replicas of
	// the store find them (Share); users returns the users file, for
	// their sessions made by another replica.
	shared atomic.Pointer[SharedSessions]
	users  func() *Users
	log    *slog.Logger

	mu   sync.Mutex
	live map[[16]byte]*liveSession
	// ended holds the shared sessions that ended here while the shared
	// store may still have them (unshare), with when to forget them.
	ended map[[16]byte]time.Time
	// byName holds each token's live sessions, oldest first. All
	// sessions last ttl, so the oldest is also the first to expire.
	byName map[string][][16]byte
}

type liveSession struct {
	// key names the principal in byName: its source and name, so that
	// a token and a user of one name do not share a bound.
	key     string
	id      Identity
	recheck Recheck
	expires time.Time
	// shared is set once the session is in the shared store: a check
	// then also asks whether it was logged out through another replica.
	shared atomic.Bool
	// role is the Role the session's last check gave; a recheck that
	// gives another is audited once.
	role atomic.Int32
}

// Recheck returns what a session's principal may do now, or an error
// when it may no longer do anything (its token left the file, its user
// was removed, its provider refused a refresh). Sessions.Check calls it
// on every use of the session; it must be cheap.
type Recheck func(now time.Time) (Identity, error)

// Session is one live login.
type Session struct {
	Identity Identity
	Expires  time.Time
	// CSRF is the session's synchronizer token: forms of the session
	// carry it, and the server compares it with CheckCSRF.
	CSRF string
}

func newSessions(tokens *Tokens, ttl time.Duration) *Sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	s := &Sessions{tokens: tokens, ttl: ttl, now: time.Now, limits: newLoginLimits(),
		live: map[[16]byte]*liveSession{}, byName: map[string][][16]byte{}, ended: map[[16]byte]time.Time{}}
	rand.Read(s.key[:])
	return s
}

// TTL returns how long a new session lasts.
func (s *Sessions) TTL() time.Duration { return s.ttl }

// Login checks secret as the tokens do and starts a session for its
// token, for a client at addr (the request's RemoteAddr). It returns the
// cookie value that names the session. A client that tries too often gets
// a *LoginLimitError that says how long to wait.
func (s *Sessions) Login(addr, secret string) (string, Session, error) {
	now, client := s.now(), clientKey(addr)
	if err := s.limits.admit(client, now); err != nil {
		return "", Session{}, err
	}
	id, err := s.tokens.check("", secret)
	if err != nil {
		return "", Session{}, s.limits.failed(client, now, err)
	}
	if err := s.limits.admitToken(id.Name, now); err != nil {
		return "", Session{}, err
	}
	digest := sha256.Sum256([]byte(secret))
	name := id.Name
	value, sess := s.Start(id, func(time.Time) (Identity, error) {
		role, ok := s.tokens.current(name, digest)
		if !ok {
			return Identity{}, errBadCredentials
		}
		now := id
		now.Role = role
		return now, nil
	}, Elsewhere{Token: hex.EncodeToString(digest[:])})
	return value, sess, nil
}

// Start starts a session for id, whom a login already checked, and
// returns the cookie value that names it. recheck, when not nil, says on
// every use what id may do now; without it, id stays as it is until the
// session ends. The session ends at id.Expires when that comes before
// the sessions' TTL. elsewhere says how another replica checks the
// session on every use, when the sessions are shared (Share).
func (s *Sessions) Start(id Identity, recheck Recheck, elsewhere Elsewhere) (string, Session) {
	now := s.now()
	expires := now.Add(s.ttl)
	if !id.Expires.IsZero() && id.Expires.Before(expires) {
		expires = id.Expires
	}
	src := id.Source
	if src == "" {
		src = SourceToken
	}
	var sid [16]byte
	rand.Read(sid[:])
	ls := &liveSession{key: string(src) + ":" + id.Name, id: id, recheck: recheck, expires: expires}
	ls.role.Store(int32(id.Role))
	s.mu.Lock()
	s.makeRoomLocked(ls.key, now)
	s.live[sid] = ls
	s.byName[ls.key] = append(s.byName[ls.key], sid)
	s.mu.Unlock()
	s.share(sid, ls, elsewhere)
	return s.sign(sid, ls.expires), Session{Identity: id, Expires: ls.expires, CSRF: csrfOf(sid)}
}

// makeRoomLocked ends sessions so that the principal of key may open one
// more: its own oldest when it has sessionsPerToken, and at maxSessions
// the expired ones, or if none, the oldest of the principal with the
// most.
func (s *Sessions) makeRoomLocked(key string, now time.Time) {
	if own := s.byName[key]; len(own) >= sessionsPerToken {
		s.dropLocked(own[0])
	}
	if len(s.live) < maxSessions {
		return
	}
	s.pruneLocked(now)
	if len(s.live) < maxSessions {
		return
	}
	var most [][16]byte
	for _, ids := range s.byName {
		if len(ids) > len(most) || len(ids) == len(most) && s.live[ids[0]].expires.Before(s.live[most[0]].expires) {
			most = ids
		}
	}
	s.dropLocked(most[0])
}

// pruneLocked forgets expired sessions.
func (s *Sessions) pruneLocked(now time.Time) {
	for id, ls := range s.live {
		if !now.Before(ls.expires) {
			s.dropLocked(id)
		}
	}
}

// dropLocked forgets session sid.
func (s *Sessions) dropLocked(sid [16]byte) {
	ls, ok := s.live[sid]
	if !ok {
		return
	}
	delete(s.live, sid)
	if ls.shared.Load() && s.now().Before(ls.expires) {
		// Ended before its time (a newer login took its place): on the
		// other replicas too.
		s.ended[sid] = ls.expires
		go s.unshare(sid)
	}
	ids := s.byName[ls.key]
	if i := slices.Index(ids, sid); i >= 0 {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(s.byName, ls.key)
	} else {
		s.byName[ls.key] = ids
	}
}

// sign returns the cookie value of session sid: the id and the expiry, and
// an HMAC of both.
func (s *Sessions) sign(sid [16]byte, expires time.Time) string {
	payload := binary.BigEndian.AppendUint64(sid[:], uint64(expires.Unix()))
	mac := hmac.New(sha256.New, s.key[:])
	mac.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// parse reads a cookie value's session id and checks its expiry. here
// reports whether this process signed it; one it did not sign is
// refused (ok false) unless the sessions are shared, for another replica
// may have made it.
func (s *Sessions) parse(value string) (sid [16]byte, here, ok bool) {
	p, m, found := strings.Cut(value, ".")
	if !found {
		return sid, false, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	sum, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || len(payload) != 24 {
		return sid, false, false
	}
	mac := hmac.New(sha256.New, s.key[:])
	mac.Write(payload)
	here = hmac.Equal(sum, mac.Sum(nil))
	if !here && s.shared.Load() == nil {
		return sid, false, false
	}
	if !s.now().Before(time.Unix(int64(binary.BigEndian.Uint64(payload[16:])), 0)) {
		return sid, false, false
	}
	copy(sid[:], payload)
	return sid, here, true
}

// Check returns the live session that the cookie value names: one this
// process made, or with shared sessions one that another replica made.
func (s *Sessions) Check(value string) (Session, bool) {
	sid, here, ok := s.parse(value)
	if !ok {
		return Session{}, false
	}
	if !here {
		return s.checkShared(sid)
	}
	s.mu.Lock()
	ls := s.live[sid]
	if ls != nil && !s.now().Before(ls.expires) {
		s.dropLocked(sid)
		ls = nil
	}
	s.mu.Unlock()
	if ls == nil {
		// Made by this process before it restarted, or by another
		// replica that signed with the same key: none does.
		return s.checkShared(sid)
	}
	if ls.shared.Load() && s.loggedOutElsewhere(sid) {
		s.mu.Lock()
		s.dropLocked(sid)
		s.mu.Unlock()
		return Session{}, false
	}
	id := ls.id
	if ls.recheck != nil {
		var err error
		if id, err = ls.recheck(s.now()); err != nil {
			return Session{}, false
		}
		s.noteRole(ls, id)
	}
	return Session{Identity: id, Expires: ls.expires, CSRF: csrfOf(sid)}, true
}

// noteRole audits, once, a recheck of session ls that gave id another
// role than the check before.
func (s *Sessions) noteRole(ls *liveSession, id Identity) {
	if before := Role(ls.role.Swap(int32(id.Role))); before != id.Role {
		s.tokens.auditLog().Warn("role changed", append(id.Who(), "from", before.String(), "to", id.Role.String(), "reason", "session rechecked", "at", time.Now().UTC().Format(time.RFC3339Nano))...)
	}
}

// FromRequest returns the live session of the request's session cookie.
func (s *Sessions) FromRequest(r *http.Request) (Session, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return Session{}, false
	}
	return s.Check(c.Value)
}

// Logout ends the session that the cookie value names; the value is
// worthless from then on.
func (s *Sessions) Logout(value string) {
	sid, _, ok := s.parse(value)
	if !ok {
		return
	}
	s.mu.Lock()
	if ls := s.live[sid]; ls != nil {
		ls.shared.Store(false) // unshared below, at once
		s.dropLocked(sid)
	}
	if s.sharedStore() != nil {
		s.ended[sid] = s.now().Add(s.ttl) // refused here from now on
	}
	s.mu.Unlock()
	s.unshare(sid)
}

// CheckCSRF reports whether token is the session's synchronizer token,
// comparing in constant time.
func (sess Session) CheckCSRF(token string) bool {
	return sess.CSRF != "" && subtle.ConstantTimeCompare([]byte(sess.CSRF), []byte(token)) == 1
}

// current returns the role of the token named name whose secret has
// digest, if it still exists.
func (t *Tokens) current(name string, digest [sha256.Size]byte) (Role, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := range t.file {
		if e := &t.file[i]; e.name == name && e.digest == digest {
			return e.role, true
		}
	}
	for e := range t.ephemeral {
		if e.name == name && e.digest == digest {
			return e.role, true
		}
	}
	return 0, false
}

// sessionAllowed reports whether a request may authenticate with the
// dashboard's session cookie: reads (GET, HEAD) of the API, its watches and
// its downloads. Never the state backend, its versions or webhooks, and
// never a write.
func sessionAllowed(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return strings.HasPrefix(p, APIPrefix) && !strings.HasPrefix(p, VersionsPrefix)
}
