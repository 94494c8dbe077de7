package backend

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	path, toks := writeTokensFile(t)
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := newSessions(tokens, time.Hour)
	s.now = func() time.Time { return now }

	if _, _, err := s.Login("wrong"); !errors.Is(err, errBadCredentials) {
		t.Fatalf("login with a wrong token: %v", err)
	}
	value, sess, err := s.Login(toks["editor"])
	if err != nil {
		t.Fatal(err)
	}
	if sess.Identity != (Identity{Name: "editor", Role: RoleEdit}) || !sess.Expires.Equal(now.Add(time.Hour)) || sess.CSRF == "" {
		t.Fatalf("session %+v", sess)
	}
	if strings.Contains(value, toks["editor"]) || strings.Contains(value, "editor") {
		t.Fatal("the cookie value carries the token or its name")
	}
	if got, ok := s.Check(value); !ok || got.Identity != sess.Identity || !got.CheckCSRF(sess.CSRF) || got.CheckCSRF("x") {
		t.Fatalf("check: %+v %v", got, ok)
	}

	// Any change to the value breaks its signature.
	payload, mac, _ := strings.Cut(value, ".")
	flipped := "A" + value[1:]
	if value[0] == 'A' {
		flipped = "B" + value[1:]
	}
	for _, bad := range []string{"", "x", payload, payload + ".", flipped, payload + "." + strings.Repeat("A", len(mac)), value + "A"} {
		if _, ok := s.Check(bad); ok {
			t.Errorf("tampered value %q is accepted", bad)
		}
	}
	// Another server's key does not verify it.
	other := newSessions(tokens, time.Hour)
	other.live = s.live
	if _, ok := other.Check(value); ok {
		t.Error("a value signed with another key is accepted")
	}

	// Expiry: the signed time, and the server's own record.
	now = now.Add(time.Hour)
	if _, ok := s.Check(value); ok {
		t.Error("an expired session is accepted")
	}
	now = now.Add(-time.Hour)

	// Logout forgets the session; a second one lives on.
	second, _, err := s.Login(toks["admin"])
	if err != nil {
		t.Fatal(err)
	}
	s.Logout(value)
	if _, ok := s.Check(value); ok {
		t.Error("a logged out session is accepted")
	}
	if got, ok := s.Check(second); !ok || got.Identity.Role != RoleAdmin {
		t.Errorf("the other session: %+v %v", got, ok)
	}
}

func TestSessionsBounded(t *testing.T) {
	path, toks := writeTokensFile(t)
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s := newSessions(tokens, time.Minute)
	s.now = func() time.Time { return now }
	for range maxSessions {
		if _, _, err := s.Login(toks["viewer"]); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Login(toks["viewer"]); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("login past the bound: %v", err)
	}
	now = now.Add(time.Minute)
	if _, _, err := s.Login(toks["viewer"]); err != nil {
		t.Fatalf("login once the others expired: %v", err)
	}
	if len(s.live) != 1 {
		t.Errorf("%d sessions kept, want the new one only", len(s.live))
	}
}
