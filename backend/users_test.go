package backend

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Hashes made by other implementations: the argon2id vector of the
// reference implementation's tests (password "password", salt
// "somesalt"), and OpenBSD's bcrypt vector for "U*U", as $2a$ and $2b$.
const (
	refArgon2id = "$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
	refBcrypt2a = "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"
	refBcrypt2b = "$2b$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"
)

// cheapArgon2id hashes password with small parameters, for tests that
// log in often.
func cheapArgon2id(password string) string {
	salt := []byte("0123456789abcdef")
	key := argon2.IDKey([]byte(password), salt, 1, 64, 1, 32)
	return fmt.Sprintf("$argon2id$v=19$m=64,t=1,p=1$%s$%s", base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

func cheapBcrypt(t testing.TB, password string) string {
	t.Helper()
	b, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeUsers(t testing.TB, path, text string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "users")
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHashFormats(t *testing.T) {
	for _, c := range []struct {
		hash, password string
		kind           string
	}{
		{refArgon2id, "password", HashArgon2id},
		{refBcrypt2a, "U*U", HashBcrypt},
		{refBcrypt2b, "U*U", HashBcrypt},
		{cheapArgon2id("s3cret pass"), "s3cret pass", HashArgon2id},
	} {
		h, err := parseHash(c.hash)
		if err != nil {
			t.Fatalf("%s: %v", c.hash, err)
		}
		if h.kind != c.kind {
			t.Errorf("%s: kind %s, want %s", c.hash, h.kind, c.kind)
		}
		if !h.verify(c.password) {
			t.Errorf("%s: the right password does not verify", c.hash)
		}
		for _, wrong := range []string{c.password + "x", "x" + c.password} {
			if h.verify(wrong) {
				t.Errorf("%s: %q verifies", c.hash, wrong)
			}
		}
	}
	// What HashPassword makes, the file takes, with the parameters it
	// says.
	for _, kind := range []string{HashArgon2id, HashBcrypt} {
		hash, err := HashPassword("correct horse", kind)
		if err != nil {
			t.Fatal(err)
		}
		h, err := parseHash(hash)
		if err != nil {
			t.Fatalf("%s: %v", hash, err)
		}
		switch kind {
		case HashArgon2id:
			if !strings.HasPrefix(hash, "$argon2id$v=19$m=19456,t=2,p=1$") || len(h.salt) != 16 || len(h.key) != 32 {
				t.Errorf("argon2id hash %s", hash)
			}
		case HashBcrypt:
			if !strings.HasPrefix(hash, "$2a$12$") || h.cost != BcryptCost {
				t.Errorf("bcrypt hash %s", hash)
			}
		}
		if !h.verify("correct horse") || h.verify("correct horsE") {
			t.Errorf("%s: verify is wrong", kind)
		}
		line, err := UserLine("ana", RoleEdit, hash)
		if err != nil || line != "ana edit "+hash {
			t.Errorf("line %q, %v", line, err)
		}
	}
	if _, err := HashPassword(strings.Repeat("x", 73), HashBcrypt); err == nil || !strings.Contains(err.Error(), "first 72 bytes") {
		t.Errorf("a 73-byte bcrypt password: %v", err)
	}
	if _, err := HashPassword("", HashArgon2id); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty password: %v", err)
	}
	if _, err := HashPassword("x", "scrypt"); err == nil || !strings.Contains(err.Error(), `unknown hash "scrypt"`) {
		t.Errorf("scrypt: %v", err)
	}
}

func TestUsersFileErrors(t *testing.T) {
	good := cheapArgon2id("pw")
	for _, c := range []struct {
		text, want string
	}{
		{"ana edit\n", ":1: want `NAME ROLE HASH`, got 2 fields"},
		{"# users\n\nana edit " + good + "\nana view " + good + "\n", `:4: user "ana" already listed on line 3`},
		{"ana owner " + good + "\n", `:1: unknown role "owner"`},
		{"ana:x edit " + good + "\n", `:1: user name "ana:x"`},
		{"ana edit s3cret\n", ":1: user ana: unknown hash"},
		{"ana edit $2y$10$abc\n", ":1: user ana: unknown hash"},
		{"ana edit $2b$10$short\n", ":1: user ana: not a valid bcrypt hash"},
		{"ana edit $argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5\n", ":1: user ana: argon2i and argon2d hashes are not accepted"},
		{"\n\nana edit $argon2id$v=16$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5\n", ":3: user ana: not a valid argon2id hash: version v=16"},
		{"ana edit $argon2id$v=19$m=64,t=0,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5\n", "m, t and p must be set"},
		{"ana edit $argon2id$v=19$m=64,t=1,p=1$c2FsdA$a2V5a2V5a2V5a2V5a2V5\n", "salt or hash not unpadded base64"},
		{"ana edit $argon2id$v=19$m=64,t=1,x=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5\n", "unknown parameter x"},
		{"# nobody yet\n", ": no users: add one with `rezuscloud user add"},
	} {
		path := writeUsers(t, "", c.text)
		_, err := LoadUsers(path)
		if err == nil || !strings.HasPrefix(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %s…%s", c.text, err, path, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error repeats the hash field: %v", err)
		}
	}
	if _, err := LoadUsers(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "users file: open") {
		t.Errorf("a missing file: %v", err)
	}
}

func TestUsersReload(t *testing.T) {
	path := writeUsers(t, "", "# team\nana edit "+cheapArgon2id("a")+" # lead\nbo view "+cheapBcrypt(t, "b")+"\n")
	u, err := LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := u.Verify("ana", "a"); err != nil || id != (Identity{Name: "ana", Role: RoleEdit, Source: SourceLocal}) {
		t.Fatalf("ana: %+v %v", id, err)
	}
	if id, err := u.Verify("bo", "b"); err != nil || id.Role != RoleView {
		t.Fatalf("bo: %+v %v", id, err)
	}
	for _, c := range [][2]string{{"ana", "b"}, {"bo", "a"}, {"cy", "a"}, {"", ""}, {"ana", strings.Repeat("a", 2000)}} {
		if _, err := u.Verify(c[0], c[1]); !errors.Is(err, errBadCredentials) {
			t.Errorf("%q/%q: %v", c[0], c[1], err)
		}
	}
	anaHash := u.byName["ana"].hash
	writeUsers(t, path, "ana admin "+anaHash+"\ncy view "+cheapArgon2id("c")+"\nbo view "+cheapArgon2id("b2")+"\n")
	changes, err := u.Reload()
	if err != nil {
		t.Fatal(err)
	}
	want := []UserChange{{Name: "ana", Old: RoleEdit, New: RoleAdmin}, {Name: "bo", Old: RoleView, New: RoleView, Password: true}, {Name: "cy", New: RoleView}}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v", changes, want)
	}
	if _, err := u.Verify("bo", "b"); err == nil {
		t.Error("bo's old password still works")
	}
	if role, ok := u.current("ana", anaHash); !ok || role != RoleAdmin {
		t.Errorf("ana now %v %v", role, ok)
	}
	// A broken file leaves the users as they were.
	writeUsers(t, path, "ana admin nohash\n")
	if _, err := u.Reload(); err == nil || !strings.Contains(err.Error(), path+":1:") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	if u.Len() != 3 {
		t.Errorf("%d users after a failed reload", u.Len())
	}
}

// TestMissingUserCostsTheSame: a name that is not in the file is checked
// against a dummy hash of the first user's algorithm and parameters, and
// takes as long as a wrong password.
func TestMissingUserCostsTheSame(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), 9)
	if err != nil {
		t.Fatal(err)
	}
	u, err := LoadUsers(writeUsers(t, "", "ana edit "+string(hash)+"\nbo edit "+cheapArgon2id("b")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if u.dummy.kind != HashBcrypt || u.dummy.cost != 9 || string(u.dummy.bcrypt) == string(hash) {
		t.Fatalf("dummy %s cost %d", u.dummy.kind, u.dummy.cost)
	}
	fastest := func(name string) time.Duration {
		best := time.Hour
		for range 5 {
			start := time.Now()
			if _, err := u.Verify(name, "wrong"); err == nil {
				t.Fatal("a wrong password verifies")
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	wrong, missing := fastest("ana"), fastest("nobody")
	t.Logf("wrong password %v, missing user %v", wrong, missing)
	if missing < wrong/2 || missing > wrong*2 {
		t.Errorf("a missing user takes %v, a wrong password %v", missing, wrong)
	}

	a, err := LoadUsers(writeUsers(t, "", "bo edit "+refArgon2id+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := a.dummy; d.kind != HashArgon2id || d.memory != 65536 || d.time != 2 || d.threads != 1 || len(d.key) != 32 || string(d.key) == string(a.byName["bo"].ph.key) {
		t.Errorf("argon2id dummy %+v", d)
	}
}

// FuzzParseUsers: any users file either parses into users whose hashes
// parse, or fails with an error that names the file.
func FuzzParseUsers(f *testing.F) {
	f.Add([]byte("ana edit " + refArgon2id + "\nbo view " + refBcrypt2b + " # x\n"))
	f.Add([]byte("ana edit $argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5\n"))
	f.Add([]byte("# only\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, _, err := parseUsers("users", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "users:") {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for name, e := range entries {
			if CheckUserName(name) != nil || e.role < RoleView || e.role > RoleAdmin {
				t.Fatalf("accepted %q %v", name, e.role)
			}
			if _, err := parseHash(e.hash); err != nil {
				t.Fatalf("accepted hash %q: %v", e.hash, err)
			}
		}
	})
}
