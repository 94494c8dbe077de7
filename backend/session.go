package backend

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// SessionCookie is the name of the cookie that carries a dashboard
// session.
const SessionCookie = "rezuscloud_session"

// DefaultSessionTTL is how long a dashboard session lasts unless
// Config.SessionTTL says otherwise.
const DefaultSessionTTL = 12 * time.Hour

// maxSessions bounds the sessions alive at once.
const maxSessions = 10000

// Sessions are the logins of the dashboard. A browser logs in once with a
// token; the server keeps the session and hands the browser a cookie that
// names it, signed with a key that lives only in this process, so that the
// browser never sends the token again. A session ends when it expires,
// when it is logged out (the server forgets it, whatever the browser
// keeps), when the server restarts, and when its token leaves the tokens
// file; its role is the token's current one. Sessions is safe for
// concurrent use.
type Sessions struct {
	tokens *Tokens
	ttl    time.Duration
	key    [32]byte
	now    func() time.Time

	mu   sync.Mutex
	live map[[16]byte]*liveSession
}

type liveSession struct {
	name    string
	digest  [sha256.Size]byte
	expires time.Time
	csrf    string
}

// Session is one live login.
type Session struct {
	Identity Identity
	Expires  time.Time
	// CSRF is the session's synchronizer token: forms of the session
	// carry it, and the server compares it with CheckCSRF.
	CSRF string
}

// ErrTooManySessions is Login's answer while maxSessions are alive.
var ErrTooManySessions = errors.New("too many dashboard sessions are open; try again later")

func newSessions(tokens *Tokens, ttl time.Duration) *Sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	s := &Sessions{tokens: tokens, ttl: ttl, now: time.Now, live: map[[16]byte]*liveSession{}}
	rand.Read(s.key[:])
	return s
}

// TTL returns how long a new session lasts.
func (s *Sessions) TTL() time.Duration { return s.ttl }

// Login checks secret as the tokens do and starts a session for its
// token. It returns the cookie value that names the session.
func (s *Sessions) Login(secret string) (string, Session, error) {
	id, err := s.tokens.check("", secret)
	if err != nil {
		return "", Session{}, err
	}
	var sid [16]byte
	rand.Read(sid[:])
	ls := &liveSession{name: id.Name, digest: sha256.Sum256([]byte(secret)), expires: s.now().Add(s.ttl), csrf: newSecret()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.live) >= maxSessions {
		s.pruneLocked()
		if len(s.live) >= maxSessions {
			return "", Session{}, ErrTooManySessions
		}
	}
	s.live[sid] = ls
	return s.sign(sid, ls.expires), Session{Identity: id, Expires: ls.expires, CSRF: ls.csrf}, nil
}

// pruneLocked forgets expired sessions.
func (s *Sessions) pruneLocked() {
	now := s.now()
	for id, ls := range s.live {
		if !now.Before(ls.expires) {
			delete(s.live, id)
		}
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

// parse verifies a cookie value's signature and expiry and returns its
// session id.
func (s *Sessions) parse(value string) ([16]byte, bool) {
	var sid [16]byte
	p, m, ok := strings.Cut(value, ".")
	if !ok {
		return sid, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	sum, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || len(payload) != 24 {
		return sid, false
	}
	mac := hmac.New(sha256.New, s.key[:])
	mac.Write(payload)
	if !hmac.Equal(sum, mac.Sum(nil)) {
		return sid, false
	}
	if !s.now().Before(time.Unix(int64(binary.BigEndian.Uint64(payload[16:])), 0)) {
		return sid, false
	}
	copy(sid[:], payload)
	return sid, true
}

// Check returns the live session that the cookie value names.
func (s *Sessions) Check(value string) (Session, bool) {
	sid, ok := s.parse(value)
	if !ok {
		return Session{}, false
	}
	s.mu.Lock()
	ls := s.live[sid]
	if ls != nil && !s.now().Before(ls.expires) {
		delete(s.live, sid)
		ls = nil
	}
	s.mu.Unlock()
	if ls == nil {
		return Session{}, false
	}
	role, ok := s.tokens.current(ls.name, ls.digest)
	if !ok {
		return Session{}, false
	}
	return Session{Identity: Identity{Name: ls.name, Role: role}, Expires: ls.expires, CSRF: ls.csrf}, true
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
	if sid, ok := s.parse(value); ok {
		s.mu.Lock()
		delete(s.live, sid)
		s.mu.Unlock()
	}
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
