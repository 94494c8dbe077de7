package backend

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"
)

// SharedSessions keeps the dashboard's sessions where every replica of
// one store finds them (in etcd), so that a browser may move between the
// replicas, and a session outlives a restart of the replica that made it.
// Its key is a digest of the session's id, never the id; its record says
// who the session is for and how another replica checks it on every use
// (Elsewhere). A record lasts until its session expires.
type SharedSessions interface {
	PutSession(digest [sha256.Size]byte, rec SessionRecord) error
	// FindSession returns the record under digest; ok is false when there
	// is none, err when the store does not answer.
	FindSession(digest [sha256.Size]byte) (rec SessionRecord, ok bool, err error)
	DeleteSession(digest [sha256.Size]byte) error
}

// SessionRecord is what the replicas share of a session.
type SessionRecord struct {
	Name    string    `json:"name"`
	Role    Role      `json:"role"`
	Source  Source    `json:"source,omitempty"`
	Subject string    `json:"subject,omitempty"`
	Email   string    `json:"email,omitempty"`
	Expires time.Time `json:"expires"`
	Elsewhere
}

// Elsewhere is how a replica other than the one that made a session
// checks it on every use, as the replica that made it does with its
// Recheck. The zero Elsewhere is accepted nowhere else.
type Elsewhere struct {
	// Token is the hex SHA-256 of the token of the tokens file that the
	// session logged in with: the session holds while the token does,
	// with its current role.
	Token string `json:"token,omitempty"`
	// Password is the hex SHA-256 of a local user's password hash at
	// the login: the session holds while the users file has the user
	// with that password, with the user's current role.
	Password string `json:"password,omitempty"`
	// Until, for single sign-on, is the expiry of the login's ID token:
	// only the replica that made the session holds its refresh token
	// and refreshes it, so the others accept it as it was until then.
	Until time.Time `json:"until,omitzero"`
}

// errNotElsewhere refuses a shared session that another replica cannot
// check, or whose time elsewhere is over.
var errNotElsewhere = errors.New("this session is checked only by the replica that made it")

// Share makes s keep every session it starts from now on in shared, and
// accept those that other replicas keep there. users returns the users
// file, for the sessions of local users; log gets what the shared store
// refuses. Call it before the server serves.
func (s *Sessions) Share(shared SharedSessions, users func() *Users, log *slog.Logger) {
	s.users, s.log = users, log
	s.shared.Store(&shared)
}

// sharedStore returns the shared sessions, or nil.
func (s *Sessions) sharedStore() SharedSessions {
	if p := s.shared.Load(); p != nil {
		return *p
	}
	return nil
}

// sessionDigest is the key of session sid in the shared store.
func sessionDigest(sid [16]byte) [sha256.Size]byte {
	return sha256.Sum256(append([]byte("rezuscloud session\x00"), sid[:]...))
}

// csrfOf is the synchronizer token of session sid: derived from its id,
// which only the session's cookie carries, so that every replica that is
// shown the cookie knows it, and a form's token does not give away the
// cookie.
func csrfOf(sid [16]byte) string {
	mac := hmac.New(sha256.New, sid[:])
	mac.Write([]byte("rezuscloud csrf"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// share records the new session ls in the shared store. Without the
// record the session still works on this replica.
func (s *Sessions) share(sid [16]byte, ls *liveSession, elsewhere Elsewhere) {
	shared := s.sharedStore()
	if shared == nil {
		return
	}
	id := ls.id
	rec := SessionRecord{Name: id.Name, Role: id.Role, Source: id.Source, Subject: id.Subject, Email: id.Email,
		Expires: ls.expires, Elsewhere: elsewhere}
	if err := shared.PutSession(sessionDigest(sid), rec); err != nil {
		s.log.Warn("a dashboard session is not shared with the other replicas: only this one accepts it", append(id.Who(), "err", err)...)
		return
	}
	ls.shared.Store(true)
}

// unshare removes session sid, which ended, from the shared store. Until
// the store has removed it, this replica refuses it (Sessions.ended); a
// store that does not answer is asked again every unshareRetry, in the
// background, until it does or the session would have expired, while the
// other replicas still accept the session.
func (s *Sessions) unshare(sid [16]byte) {
	shared := s.sharedStore()
	if shared == nil {
		return
	}
	until := s.now().Add(s.ttl)
	s.mu.Lock()
	s.ended[sid] = until
	s.mu.Unlock()
	try := func() bool {
		err := shared.DeleteSession(sessionDigest(sid))
		if err == nil || !s.now().Before(until) {
			s.mu.Lock()
			delete(s.ended, sid)
			s.mu.Unlock()
			return true
		}
		s.log.Warn("a dashboard session that ended is still in the shared store, and the other replicas accept it: trying again", "retry", unshareRetry, "err", err)
		return false
	}
	if try() {
		return
	}
	go func() {
		for !try() {
			time.Sleep(unshareRetry)
		}
	}()
}

// unshareRetry is how often unshare asks again.
const unshareRetry = 5 * time.Second

// loggedOutElsewhere reports whether the shared store no longer has
// session sid: it was logged out through another replica. A store that
// does not answer leaves the session as this replica knows it.
func (s *Sessions) loggedOutElsewhere(sid [16]byte) bool {
	shared := s.sharedStore()
	if shared == nil {
		return false
	}
	_, found, err := shared.FindSession(sessionDigest(sid))
	return err == nil && !found
}

// checkShared returns the session sid that another replica made, checked
// as its record says (Elsewhere).
func (s *Sessions) checkShared(sid [16]byte) (Session, bool) {
	shared := s.sharedStore()
	if shared == nil {
		return Session{}, false
	}
	s.mu.Lock()
	_, ended := s.ended[sid]
	s.mu.Unlock()
	if ended {
		return Session{}, false
	}
	rec, found, err := shared.FindSession(sessionDigest(sid))
	if err != nil {
		s.log.Warn("look up a dashboard session shared by another replica", "err", err)
	}
	now := s.now()
	if !found || !now.Before(rec.Expires) {
		return Session{}, false
	}
	id, err := s.recheckElsewhere(rec, now)
	if err != nil {
		return Session{}, false
	}
	return Session{Identity: id, Expires: rec.Expires, CSRF: csrfOf(sid)}, true
}

// recheckElsewhere is a shared session's Recheck on a replica that did
// not make it.
func (s *Sessions) recheckElsewhere(rec SessionRecord, now time.Time) (Identity, error) {
	id := Identity{Name: rec.Name, Role: rec.Role, Source: rec.Source, Subject: rec.Subject, Email: rec.Email}
	var role Role
	ok := false
	switch {
	case rec.Token != "":
		var digest [sha256.Size]byte
		if b, err := hex.DecodeString(rec.Token); err == nil && len(b) == len(digest) {
			copy(digest[:], b)
			role, ok = s.tokens.current(rec.Name, digest)
		}
	case rec.Password != "":
		var users *Users
		if s.users != nil {
			users = s.users()
		}
		if users != nil {
			role, ok = users.currentDigest(rec.Name, rec.Password)
		}
	case !rec.Until.IsZero():
		role, ok = rec.Role, now.Before(rec.Until)
	}
	if !ok {
		return Identity{}, errNotElsewhere
	}
	id.Role = role
	return id, nil
}

// passwordDigest is how a shared session names a local user's password:
// the hex SHA-256 of its hash.
func passwordDigest(hash string) string {
	sum := sha256.Sum256([]byte(hash))
	return hex.EncodeToString(sum[:])
}
