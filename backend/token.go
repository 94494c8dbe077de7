package backend

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Role is what a token may do. Roles are ordered: each includes the ones
// before it.
type Role int

// The roles. Reading state needs RoleView; writing and locking need
// RoleEdit; state history and force-unlock need RoleAdmin.
const (
	RoleView Role = iota + 1
	RoleEdit
	RoleAdmin
)

func (r Role) String() string {
	switch r {
	case RoleView:
		return "view"
	case RoleEdit:
		return "edit"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses "view", "edit" or "admin".
func ParseRole(s string) (Role, error) {
	switch s {
	case "view":
		return RoleView, nil
	case "edit":
		return RoleEdit, nil
	case "admin":
		return RoleAdmin, nil
	}
	return 0, fmt.Errorf("unknown role %q: want view, edit or admin", s)
}

// Tokens checks credentials. It holds the tokens of a tokens file, which
// stores only SHA-256 digests, and ephemeral tokens that exist only in
// memory. A nil *Tokens (no tokens file) authenticates every request as
// Anonymous. Tokens is safe for concurrent use.
type Tokens struct {
	mu   sync.RWMutex
	path string
	file []tokenEntry
	// ephemeral holds each ephemeral token and the Unix nanoseconds of
	// its last use.
	ephemeral map[*tokenEntry]*atomic.Int64
	shared    SharedTokens
	// now is the clock of expiries (time.Now when nil); audit, when not
	// nil, returns the audit log for refused expired tokens and the role
	// changes of a reload.
	now   func() time.Time
	audit func() *slog.Logger
	// refused counts repeated refusals (see Server.AuditRefused); nil:
	// each is written.
	refused *refusals
	// used records the last use of the file's tokens (see lastused.go).
	used *tokenUsage
	// checks are the other ways in (AddCheck), tried in order after
	// the tokens; closed says one of them is configured, so that
	// requests without credentials are refused (Require).
	checks []CredentialCheck
	closed bool
}

// SharedTokens keeps the digests of credentials that one replica made
// where the other replicas of one store find them, so that they work on
// every replica: the ephemeral tokens a replica hands to its tofu runs
// (see Tokens.Share) and the bearer tokens of local users' logins.
type SharedTokens interface {
	// Share records id under digest until remove is called, or until
	// this replica's membership ends.
	Share(digest [sha256.Size]byte, id Identity) (remove func(), err error)
	// Find returns the identity that a live replica shared under digest.
	Find(digest [sha256.Size]byte) (Identity, bool)
	// Revoke removes what any replica shared under digest.
	Revoke(digest [sha256.Size]byte) error
}

// sharedStore returns what Share gave t, or nil.
func (t *Tokens) sharedStore() SharedTokens {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.shared
}

// Share makes t record every ephemeral token it mints from now on in s,
// and accept those that s holds from other replicas.
func (t *Tokens) Share(s SharedTokens) {
	t.mu.Lock()
	t.shared = s
	t.mu.Unlock()
}

type tokenEntry struct {
	name   string
	role   Role
	digest [sha256.Size]byte
	// expires is when the token stops working; zero for never.
	expires time.Time
	// owner names the person or team the token is for; it may be empty.
	owner string
}

// LoadTokens reads a tokens file: one token per line, `NAME ROLE
// SHA256-HEX-OF-TOKEN [expires=RFC3339] [owner=NAME]`, blank lines and
// `#` comments ignored. Errors name the file and line.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path, ephemeral: map[*tokenEntry]*atomic.Int64{}, used: newTokenUsage()}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// NewTokens returns a Tokens without a file, for ephemeral tokens only.
func NewTokens() *Tokens {
	return &Tokens{ephemeral: map[*tokenEntry]*atomic.Int64{}, used: newTokenUsage()}
}

// Reload reads the tokens file again and replaces the file's tokens when it
// parses. On an error the tokens in use stay as they were. Ephemeral
// tokens are kept. A token whose role changed, or that left the file, is
// written to the audit log.
func (t *Tokens) Reload() error {
	if t.path == "" {
		return nil
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	entries, err := parseTokens(t.path, data)
	if err != nil {
		return err
	}
	t.mu.Lock()
	old := t.file
	t.file = entries
	t.mu.Unlock()
	t.auditRoleChanges(old, entries)
	return nil
}

// auditRoleChanges writes to the audit log each token of before whose
// role differs in after, or that after lacks.
func (t *Tokens) auditRoleChanges(before, after []tokenEntry) {
	now := map[string]Role{}
	for _, e := range after {
		now[e.name] = e.role
	}
	for _, e := range before {
		id := Identity{Name: e.name, Role: e.role, Source: SourceToken}
		switch role, ok := now[e.name]; {
		case !ok:
			t.auditLog().Warn("role changed", append(id.Who(), "from", e.role.String(), "to", "none", "reason", "token removed from the tokens file", "at", time.Now().UTC().Format(time.RFC3339Nano))...)
		case role != e.role:
			t.auditLog().Warn("role changed", append(id.Who(), "from", e.role.String(), "to", role.String(), "reason", "tokens file reloaded", "at", time.Now().UTC().Format(time.RFC3339Nano))...)
		}
	}
}

// auditLog returns the audit log, or a log that discards without one.
func (t *Tokens) auditLog() *slog.Logger {
	if t == nil {
		return slog.New(slog.DiscardHandler)
	}
	t.mu.RLock()
	audit := t.audit
	t.mu.RUnlock()
	if audit == nil {
		return slog.New(slog.DiscardHandler)
	}
	return audit()
}

// setClock sets the clock that token expiries are compared with; nil
// means time.Now.
func (t *Tokens) setClock(now func() time.Time) {
	t.mu.Lock()
	t.now = now
	t.mu.Unlock()
}

// setAudit sets where refused expired tokens and role changes go.
func (t *Tokens) setAudit(audit func() *slog.Logger, refused *refusals) {
	t.mu.Lock()
	t.audit, t.refused = audit, refused
	t.mu.Unlock()
}

// auditRefused audits a refusal as Server.AuditRefused does.
func (t *Tokens) auditRefused(msg, client, kind string, attrs ...any) {
	t.mu.RLock()
	refused := t.refused
	t.mu.RUnlock()
	if refused == nil {
		t.auditLog().Warn(msg, attrs...)
		return
	}
	refused.warn(t.auditLog(), msg, client, kind, attrs...)
}

// clock returns the current time by t's clock.
func (t *Tokens) clock() time.Time {
	t.mu.RLock()
	now := t.now
	t.mu.RUnlock()
	if now == nil {
		return time.Now()
	}
	return now()
}

// Len returns the number of tokens from the file.
func (t *Tokens) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.file)
}

func parseTokens(path string, data []byte) ([]tokenEntry, error) {
	var entries []tokenEntry
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want `NAME ROLE SHA256-HEX [expires=RFC3339] [owner=NAME]`, got %d fields", path, n, len(fields))
		}
		name, roleText, digestText := fields[0], fields[1], fields[2]
		if err := checkTokenName(name); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if first, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s:%d: token name %q already used on line %d", path, n, name, first)
		}
		seen[name] = n
		role, err := ParseRole(roleText)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		raw, err := hex.DecodeString(digestText)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%s:%d: third field must be the 64 hex digits of the token's SHA-256, not the token itself", path, n)
		}
		e := tokenEntry{name: name, role: role}
		copy(e.digest[:], raw)
		if err := e.parseOptions(fields[3:]); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// parseOptions reads the optional fields after the digest: expires= and
// owner=, each at most once.
func (e *tokenEntry) parseOptions(fields []string) error {
	seen := map[string]bool{}
	for _, f := range fields {
		key, value, ok := strings.Cut(f, "=")
		if !ok || (key != "expires" && key != "owner") {
			return fmt.Errorf("unknown field %q after the digest: want expires=RFC3339 or owner=NAME", f)
		}
		if seen[key] {
			return fmt.Errorf("%s= given twice", key)
		}
		seen[key] = true
		switch key {
		case "expires":
			at, err := time.Parse(time.RFC3339, value)
			if err != nil {
				return fmt.Errorf("expires=%q: want an RFC 3339 time such as 2027-01-01T00:00:00Z", value)
			}
			e.expires = at.UTC()
		case "owner":
			if err := checkTokenName(value); err != nil {
				return fmt.Errorf("owner: %w", err)
			}
			e.owner = value
		}
	}
	return nil
}

// checkTokenName accepts names that work as an HTTP basic-auth username and
// read well in logs: printable ASCII without spaces, colons or '#'.
func checkTokenName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("token name must be 1 to 128 characters")
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || c == ':' || c == '#' {
			return fmt.Errorf("token name %q: only printable ASCII without spaces, ':' or '#'", name)
		}
	}
	return nil
}

// NewToken returns a fresh random token (256 bits) and the tokens-file
// line for it.
func NewToken(name string, role Role) (token, line string, err error) {
	return NewTokenFor(name, role, TokenOptions{})
}

// TokenOptions are the optional fields of a tokens-file line.
type TokenOptions struct {
	// Expires is when the token stops working; zero for never.
	Expires time.Time
	// Owner names the person or team the token is for.
	Owner string
}

// NewTokenFor is NewToken with an expiry and an owner on the line.
func NewTokenFor(name string, role Role, opts TokenOptions) (token, line string, err error) {
	if err := checkTokenName(name); err != nil {
		return "", "", err
	}
	if role < RoleView || role > RoleAdmin {
		return "", "", fmt.Errorf("unknown role %v", role)
	}
	if opts.Owner != "" {
		if err := checkTokenName(opts.Owner); err != nil {
			return "", "", fmt.Errorf("owner: %w", err)
		}
	}
	token = newSecret()
	sum := sha256.Sum256([]byte(token))
	line = fmt.Sprintf("%s %s %s", name, role, hex.EncodeToString(sum[:]))
	if !opts.Expires.IsZero() {
		line += " expires=" + opts.Expires.UTC().Format(time.RFC3339)
	}
	if opts.Owner != "" {
		line += " owner=" + opts.Owner
	}
	return token, line, nil
}

func newSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "rzc_" + base64.RawURLEncoding.EncodeToString(b)
}

// Ephemeral mints a token that lives only in this process's memory, for
// credentials the server hands to its own tofu runs; with Share, its
// digest (never the secret) is shared with the other replicas. It returns the
// secret and a func that revokes it. The name is what logs and lock
// records show; pick one that no file token uses.
func (t *Tokens) Ephemeral(name string, role Role) (secret string, revoke func()) {
	secret = newSecret()
	e := &tokenEntry{name: name, role: role, digest: sha256.Sum256([]byte(secret))}
	t.mu.Lock()
	t.ephemeral[e] = new(atomic.Int64)
	shared := t.shared
	t.mu.Unlock()
	unshare := func() {}
	if shared != nil {
		// Without the record the token still works on this replica.
		if remove, err := shared.Share(e.digest, Identity{Name: name, Role: role}); err == nil {
			unshare = remove
		}
	}
	return secret, func() {
		t.mu.Lock()
		delete(t.ephemeral, e)
		t.mu.Unlock()
		unshare()
	}
}

// ExpiredError refuses a credential past its expiry. Its message says
// what expired and when; it never holds the secret.
type ExpiredError struct {
	// What is the kind of credential, such as "token".
	What string
	Name string
	At   time.Time
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("%s %q expired at %s", e.What, e.Name, e.At.UTC().Format(time.RFC3339))
}

// errBadCredentials is the one error a failed check returns, whatever was
// wrong, so that answers do not tell which part of a credential matched.
var (
	errBadCredentials = errors.New("invalid credentials")
	errNoCredentials  = errors.New("no credentials")
)

// check finds the token whose secret is secret and, when name is not
// empty, whose name is name. It compares the digest of secret with every
// token's digest in constant time and never stops early. A token past its
// expiry is refused with an *ExpiredError, and audited.
func (t *Tokens) check(name, secret string) (Identity, error) {
	sum := sha256.Sum256([]byte(secret))
	var found tokenEntry
	var lastUse *atomic.Int64
	match := 0
	try := func(e *tokenEntry, use *atomic.Int64) {
		ok := subtle.ConstantTimeCompare(sum[:], e.digest[:])
		if name != "" && subtle.ConstantTimeCompare([]byte(name), []byte(e.name)) == 0 {
			ok = 0
		}
		if ok == 1 && match == 0 {
			found, lastUse = *e, use
			match = 1
		}
	}
	t.mu.RLock()
	for i := range t.file {
		try(&t.file[i], nil)
	}
	for e, use := range t.ephemeral {
		try(e, use)
	}
	shared := t.shared
	fromFile := match == 1 && lastUse == nil
	t.mu.RUnlock()
	if match == 0 && shared != nil {
		// Only ephemeral tokens; a login's token is its own check's.
		if id, ok := shared.Find(sum); ok && (id.Source == "" || id.Source == SourceToken) {
			try(&tokenEntry{name: id.Name, role: id.Role, digest: sum}, nil)
		}
	}
	if match == 0 {
		return t.checkOthers(name, secret)
	}
	id := Identity{Name: found.name, Role: found.role, Source: SourceToken, Expires: found.expires}
	now := t.clock()
	if !found.expires.IsZero() && !now.Before(found.expires) {
		t.auditRefused("token used after expiry", found.name, "expired", append(id.Who(), "role", id.Role.String(), "expired", found.expires.Format(time.RFC3339), "at", time.Now().UTC().Format(time.RFC3339Nano))...)
		return Identity{}, &ExpiredError{What: "token", Name: found.name, At: found.expires}
	}
	switch {
	case fromFile:
		t.used.note(found.name, now)
	case lastUse != nil:
		lastUse.Store(now.UnixNano())
	}
	return id, nil
}
