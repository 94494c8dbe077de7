package backend

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// The password hashes that HashPassword makes.
const (
	HashArgon2id = "argon2id"
	HashBcrypt   = "bcrypt"
)

// The parameters of new hashes: argon2id as OWASP recommends (19 MiB, two
// passes, one lane), bcrypt at cost 12.
const (
	argonMemory  = 19 * 1024
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
	BcryptCost   = 12
)

// maxPasswordBytes bounds a password; bcrypt reads only the first 72
// bytes, so it refuses longer ones.
const (
	maxPasswordBytes = 1024
	bcryptMaxBytes   = 72
)

// hashSlots bounds the password hashes computed at once, so that a burst
// of logins cannot take every core and, for argon2id, the memory of
// hundreds of hashes.
var hashSlots = make(chan struct{}, 4)

// Users are the local users of a users file: one user per line, `NAME
// ROLE HASH`, where HASH is a bcrypt hash ($2a$ or $2b$) or an argon2id
// hash in the PHC string form ($argon2id$v=19$m=…,t=…,p=…$salt$hash).
// Users is safe for concurrent use.
type Users struct {
	path string

	mu     sync.RWMutex
	byName map[string]userEntry
	// dummy is checked for a name that is not in the file, so that a
	// missing user costs what a wrong password does: a hash of the
	// algorithm and parameters of the file's first user.
	dummy passwordHash
}

type userEntry struct {
	name string
	role Role
	// hash is the hash's text, which a session compares on every use:
	// a new password ends the sessions of the old one.
	hash string
	ph   passwordHash
}

// UserChange is a difference between two versions of a users file.
type UserChange struct {
	Name string
	// Old and New are the roles before and after; zero when the user
	// was added (Old) or removed (New).
	Old, New Role
	// Password says that the user's hash changed.
	Password bool
}

// LoadUsers reads a users file. Errors name the file and line.
func LoadUsers(path string) (*Users, error) {
	u := &Users{path: path}
	if _, err := u.Reload(); err != nil {
		return nil, err
	}
	return u, nil
}

// Reload reads the users file again and replaces the users when it
// parses; on an error the users in use stay as they were. It returns what
// changed, by name.
func (u *Users) Reload() ([]UserChange, error) {
	data, err := os.ReadFile(u.path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	entries, first, err := parseUsers(u.path, data)
	if err != nil {
		return nil, err
	}
	dummy, err := first.dummy()
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	old := u.byName
	u.byName, u.dummy = entries, dummy
	u.mu.Unlock()
	return diffUsers(old, entries), nil
}

// diffUsers lists the users added, removed or changed from old to new, in
// the order of their names.
func diffUsers(old, new map[string]userEntry) []UserChange {
	var out []UserChange
	for name, o := range old {
		n, ok := new[name]
		switch {
		case !ok:
			out = append(out, UserChange{Name: name, Old: o.role})
		case n.role != o.role || n.hash != o.hash:
			out = append(out, UserChange{Name: name, Old: o.role, New: n.role, Password: n.hash != o.hash})
		}
	}
	if old != nil {
		for name, n := range new {
			if _, ok := old[name]; !ok {
				out = append(out, UserChange{Name: name, New: n.role})
			}
		}
	}
	slices.SortFunc(out, func(a, b UserChange) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Len returns the number of users.
func (u *Users) Len() int {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return len(u.byName)
}

// Path returns the users file.
func (u *Users) Path() string { return u.path }

func parseUsers(path string, data []byte) (map[string]userEntry, passwordHash, error) {
	entries := map[string]userEntry{}
	lines := map[string]int{}
	var first passwordHash
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
		if len(fields) != 3 {
			return nil, first, fmt.Errorf("%s:%d: want `NAME ROLE HASH`, got %d fields", path, n, len(fields))
		}
		name, roleText, hash := fields[0], fields[1], fields[2]
		if err := CheckUserName(name); err != nil {
			return nil, first, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if prev, dup := lines[name]; dup {
			return nil, first, fmt.Errorf("%s:%d: user %q already listed on line %d", path, n, name, prev)
		}
		lines[name] = n
		role, err := ParseRole(roleText)
		if err != nil {
			return nil, first, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		ph, err := parseHash(hash)
		if err != nil {
			return nil, first, fmt.Errorf("%s:%d: user %s: %w", path, n, name, err)
		}
		if len(entries) == 0 {
			first = ph
		}
		entries[name] = userEntry{name: name, role: role, hash: hash, ph: ph}
	}
	if err := sc.Err(); err != nil {
		return nil, first, fmt.Errorf("%s: %w", path, err)
	}
	if len(entries) == 0 {
		return nil, first, fmt.Errorf("%s: no users: add one with `rezuscloud user add NAME --role ROLE`", path)
	}
	return entries, first, nil
}

// CheckUserName accepts what a token name may be: a user name is a basic
// auth user name and a word in logs.
func CheckUserName(name string) error {
	if err := checkTokenName(name); err != nil {
		return errors.New(strings.Replace(err.Error(), "token name", "user name", 1))
	}
	return nil
}

// passwordHash is a parsed hash of either kind.
type passwordHash struct {
	kind string // HashArgon2id or HashBcrypt
	// bcrypt: the hash as it is.
	bcrypt []byte
	cost   int
	// argon2id: the parameters, the salt and the key.
	memory  uint32
	time    uint32
	threads uint8
	salt    []byte
	key     []byte
}

// parseHash reads a bcrypt hash or an argon2id PHC string and checks its
// parameters.
func parseHash(s string) (passwordHash, error) {
	switch {
	case strings.HasPrefix(s, "$2a$"), strings.HasPrefix(s, "$2b$"):
		cost, err := bcrypt.Cost([]byte(s))
		if err != nil || len(s) != 60 {
			return passwordHash{}, fmt.Errorf("not a valid bcrypt hash (want 60 characters, $2b$COST$…)")
		}
		return passwordHash{kind: HashBcrypt, bcrypt: []byte(s), cost: cost}, nil
	case strings.HasPrefix(s, "$argon2id$"):
		return parseArgon2id(s)
	case strings.HasPrefix(s, "$argon2i$"), strings.HasPrefix(s, "$argon2d$"):
		return passwordHash{}, fmt.Errorf("argon2i and argon2d hashes are not accepted: use argon2id")
	}
	return passwordHash{}, fmt.Errorf("unknown hash: want bcrypt ($2a$ or $2b$) or argon2id ($argon2id$v=19$m=…,t=…,p=…$salt$hash); `rezuscloud user add` makes one")
}

func parseArgon2id(s string) (passwordHash, error) {
	bad := func(why string) (passwordHash, error) {
		return passwordHash{}, fmt.Errorf("not a valid argon2id hash: %s (want $argon2id$v=19$m=MEMORY,t=TIME,p=THREADS$SALT$HASH)", why)
	}
	parts := strings.Split(s, "$")
	if len(parts) != 6 {
		return bad("wrong number of $ fields")
	}
	if parts[2] != "v=19" {
		return bad("version " + parts[2] + ", not v=19")
	}
	ph := passwordHash{kind: HashArgon2id}
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return bad("parameter " + kv)
		}
		switch k {
		case "m":
			ph.memory = uint32(n)
		case "t":
			ph.time = uint32(n)
		case "p":
			if n > 255 {
				return bad("p above 255")
			}
			ph.threads = uint8(n)
		default:
			return bad("unknown parameter " + k)
		}
	}
	if ph.time < 1 || ph.threads < 1 || ph.memory < 8*uint32(ph.threads) {
		return bad("m, t and p must be set, with m at least 8×p")
	}
	if ph.memory > 4*1024*1024 {
		return bad("m above 4 GiB")
	}
	var err1, err2 error
	ph.salt, err1 = base64.RawStdEncoding.DecodeString(parts[4])
	ph.key, err2 = base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil || len(ph.salt) < 8 || len(ph.key) < 16 {
		return bad("salt or hash not unpadded base64 of at least 8 and 16 bytes")
	}
	return ph, nil
}

// verify reports whether password matches h, in time that does not
// depend on where they differ.
func (h passwordHash) verify(password string) bool {
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	switch h.kind {
	case HashBcrypt:
		return bcrypt.CompareHashAndPassword(h.bcrypt, []byte(password)) == nil
	case HashArgon2id:
		key := argon2.IDKey([]byte(password), h.salt, h.time, h.memory, h.threads, uint32(len(h.key)))
		return subtle.ConstantTimeCompare(key, h.key) == 1
	}
	return false
}

// dummy returns a hash of a random password with h's algorithm and
// parameters, which no password matches.
func (h passwordHash) dummy() (passwordHash, error) {
	secret := newSecret()
	switch h.kind {
	case HashBcrypt:
		b, err := bcrypt.GenerateFromPassword([]byte(secret[:bcryptMaxBytes/2]), h.cost)
		if err != nil {
			return passwordHash{}, err
		}
		return passwordHash{kind: HashBcrypt, bcrypt: b, cost: h.cost}, nil
	case HashArgon2id:
		d := h
		d.salt = randomBytes(len(h.salt))
		d.key = randomBytes(len(h.key))
		return d, nil
	}
	return passwordHash{}, fmt.Errorf("no hash to model a dummy on")
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// HashPassword hashes password with kind (HashArgon2id or HashBcrypt) at
// the default parameters, in the form of the users file.
func HashPassword(password, kind string) (string, error) {
	if err := checkPassword(password); err != nil {
		return "", err
	}
	switch kind {
	case HashArgon2id:
		salt := randomBytes(argonSaltLen)
		key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
		return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
			base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)), nil
	case HashBcrypt:
		if len(password) > bcryptMaxBytes {
			return "", fmt.Errorf("bcrypt reads only the first %d bytes of a password, and this one has %d: use argon2id or a shorter password", bcryptMaxBytes, len(password))
		}
		b, err := bcrypt.GenerateFromPassword([]byte(password), BcryptCost)
		return string(b), err
	}
	return "", fmt.Errorf("unknown hash %q: want argon2id or bcrypt", kind)
}

func checkPassword(password string) error {
	switch {
	case password == "":
		return errors.New("the password is empty")
	case len(password) > maxPasswordBytes:
		return fmt.Errorf("the password has %d bytes; at most %d", len(password), maxPasswordBytes)
	}
	return nil
}

// UserLine returns the users-file line of a user.
func UserLine(name string, role Role, hash string) (string, error) {
	if err := CheckUserName(name); err != nil {
		return "", err
	}
	if role < RoleView || role > RoleAdmin {
		return "", fmt.Errorf("unknown role %v", role)
	}
	if _, err := parseHash(hash); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %s", name, role, hash), nil
}

// Verify checks a user's password and returns the user's identity. A
// name that is not in the file is checked against a dummy hash, so that
// it takes as long as a wrong password. Every failure is
// errBadCredentials.
func (u *Users) Verify(name, password string) (Identity, error) {
	e, ok := u.verify(name, password)
	if !ok {
		return Identity{}, errBadCredentials
	}
	return e.identity(), nil
}

// verify returns the entry of the user named name when password is theirs.
func (u *Users) verify(name, password string) (userEntry, bool) {
	u.mu.RLock()
	e, ok := u.byName[name]
	dummy := u.dummy
	u.mu.RUnlock()
	if !ok || len(password) > maxPasswordBytes {
		dummy.verify(password[:min(len(password), maxPasswordBytes)])
		return userEntry{}, false
	}
	return e, e.ph.verify(password)
}

func (e userEntry) identity() Identity {
	return Identity{Name: e.name, Role: e.role, Source: SourceLocal}
}

// role returns the role of the user named name, if there is one.
func (u *Users) role(name string) (Role, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	e, ok := u.byName[name]
	if !ok {
		return 0, false
	}
	return e.role, true
}

// currentDigest is current for a session shared by another replica,
// which names the password hash by its digest (passwordDigest).
func (u *Users) currentDigest(name, digest string) (Role, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	e, ok := u.byName[name]
	if !ok || subtle.ConstantTimeCompare([]byte(passwordDigest(e.hash)), []byte(digest)) != 1 {
		return 0, false
	}
	return e.role, true
}

// current returns the role of the user named name as long as their hash
// is still hash: a user who left the file, or whose password changed,
// has none.
func (u *Users) current(name, hash string) (Role, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	e, ok := u.byName[name]
	if !ok || e.hash != hash {
		return 0, false
	}
	return e.role, true
}
