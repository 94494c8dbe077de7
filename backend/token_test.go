package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadTokensErrors(t *testing.T) {
	digest := hex.EncodeToString(make([]byte, 32))
	for _, c := range []struct {
		text, want string
	}{
		{"a view\n", ":1: want `NAME ROLE SHA256-HEX [expires=RFC3339] [owner=NAME]`"},
		{"# c\n\na root " + digest + "\n", ":3: unknown role \"root\""},
		{"a view " + digest + "\na edit " + digest + "\n", ":2: token name \"a\" already used on line 1"},
		{"a view rzc_secret\n", ":1: third field must be the 64 hex digits"},
		{"a:b view " + digest + "\n", ":1: token name \"a:b\""},
	} {
		path := filepath.Join(t.TempDir(), "tokens")
		os.WriteFile(path, []byte(c.text), 0o600)
		_, err := LoadTokens(path)
		if err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("LoadTokens(%q) = %v, want %q", c.text, err, path+c.want)
		}
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("LoadTokens of a missing file succeeded")
	}
}

func TestTokensCheck(t *testing.T) {
	tok, line, err := NewToken("ci", RoleEdit)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(tok))
	if want := "ci edit " + hex.EncodeToString(sum[:]); line != want {
		t.Fatalf("line = %q, want %q", line, want)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, []byte(line+"  # the CI job\n"), 0o600)
	toks, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if toks.Open() {
		t.Fatal("tokens from a file report open mode")
	}
	if id, err := toks.check("ci", tok); err != nil || id != (Identity{Name: "ci", Role: RoleEdit, Source: SourceToken}) {
		t.Fatalf("check(ci) = %+v, %v", id, err)
	}
	if id, err := toks.check("", tok); err != nil || id.Name != "ci" {
		t.Fatalf("check of a bearer token = %+v, %v", id, err)
	}
	for _, c := range [][2]string{{"other", tok}, {"ci", tok + "x"}, {"ci", ""}} {
		if _, err := toks.check(c[0], c[1]); err == nil {
			t.Errorf("check(%q, %q) succeeded", c[0], c[1])
		}
	}

	secret, revoke := toks.Ephemeral("run-1", RoleAdmin)
	if id, err := toks.check("run-1", secret); err != nil || id != (Identity{Name: "run-1", Role: RoleAdmin, Source: SourceToken}) {
		t.Fatalf("check of an ephemeral token = %+v, %v", id, err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), secret) || strings.Contains(string(data), "run-1") {
		t.Fatal("an ephemeral token reached the tokens file")
	}
	// Reload keeps ephemeral tokens and picks up the file's changes.
	tok2, line2, _ := NewToken("ops", RoleAdmin)
	os.WriteFile(path, []byte(line2+"\n"), 0o600)
	if err := toks.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := toks.check("ci", tok); err == nil {
		t.Error("a token removed from the file still works after Reload")
	}
	if _, err := toks.check("ops", tok2); err != nil {
		t.Errorf("a token added to the file fails after Reload: %v", err)
	}
	if _, err := toks.check("run-1", secret); err != nil {
		t.Errorf("Reload dropped an ephemeral token: %v", err)
	}
	os.WriteFile(path, []byte("broken\n"), 0o600)
	if err := toks.Reload(); err == nil {
		t.Error("Reload of a broken file succeeded")
	}
	if _, err := toks.check("ops", tok2); err != nil {
		t.Errorf("a failed Reload dropped the tokens in use: %v", err)
	}
	revoke()
	if _, err := toks.check("run-1", secret); err == nil {
		t.Error("a revoked ephemeral token still works")
	}
	if _, _, err := NewToken("bad name", RoleView); err == nil {
		t.Error("NewToken accepted a name with a space")
	}
}

func TestLoadTokensOptions(t *testing.T) {
	digest := hex.EncodeToString(make([]byte, 32))
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, []byte("ci edit "+digest+" expires=2027-01-01T02:00:00+02:00 owner=platform # CI\nops admin "+digest+" owner=alice\n"), 0o600)
	toks, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []tokenEntry{
		{name: "ci", role: RoleEdit, expires: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), owner: "platform"},
		{name: "ops", role: RoleAdmin, owner: "alice"},
	}
	if len(toks.file) != 2 {
		t.Fatalf("%d tokens loaded", len(toks.file))
	}
	for i, w := range want {
		got := toks.file[i]
		got.digest = [32]byte{}
		if got != w {
			t.Errorf("token %d = %+v, want %+v", i, got, w)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"a view " + digest + " expires=2027-01-01\n", ":1: expires=\"2027-01-01\": want an RFC 3339 time"},
		{"a view " + digest + " owner=x owner=y\n", ":1: owner= given twice"},
		{"\na view " + digest + " color=red\n", ":2: unknown field \"color=red\" after the digest"},
		{"a view " + digest + " owner=a:b\n", ":1: owner: token name \"a:b\""},
	} {
		os.WriteFile(path, []byte(c.text), 0o600)
		if _, err := LoadTokens(path); err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("LoadTokens(%q) = %v, want %q", c.text, err, path+c.want)
		}
	}
}

func TestNewTokenForLine(t *testing.T) {
	at := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	tok, line, err := NewTokenFor("ci", RoleEdit, TokenOptions{Expires: at, Owner: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(tok))
	if want := "ci edit " + hex.EncodeToString(sum[:]) + " expires=2027-01-01T00:00:00Z owner=platform"; line != want {
		t.Fatalf("line = %q, want %q", line, want)
	}
	if _, _, err := NewTokenFor("ci", RoleEdit, TokenOptions{Owner: "two words"}); err == nil {
		t.Error("an owner with a space was accepted")
	}
}
