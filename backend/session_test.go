package backend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

	if _, _, err := s.Login(testClient, "wrong"); !errors.Is(err, errBadCredentials) {
		t.Fatalf("login with a wrong token: %v", err)
	}
	value, sess, err := s.Login(testClient, toks["editor"])
	if err != nil {
		t.Fatal(err)
	}
	if sess.Identity != (Identity{Name: "editor", Role: RoleEdit, Source: SourceToken}) || !sess.Expires.Equal(now.Add(time.Hour)) || sess.CSRF == "" {
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
	second, _, err := s.Login(testClient, toks["admin"])
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

// testClient is the address the session tests log in from.
const testClient = "127.0.0.1:40000"

// TestSessionsPerToken: a token's 33rd session ends its oldest; its other
// sessions and other tokens' sessions live on.
func TestSessionsPerToken(t *testing.T) {
	path, toks := writeTokensFile(t)
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := newSessions(tokens, time.Hour)
	s.now = func() time.Time { return now }
	admin, _, err := s.Login(testClient, toks["admin"])
	if err != nil {
		t.Fatal(err)
	}
	var views []string
	for range sessionsPerToken + 1 {
		now = now.Add(tokenLoginEvery) // the pace the login limits allow
		v, _, err := s.Login(testClient, toks["viewer"])
		if err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	if _, ok := s.Check(views[0]); ok {
		t.Errorf("the oldest of %d sessions of one token still works", len(views))
	}
	for i, v := range views[1:] {
		if _, ok := s.Check(v); !ok {
			t.Errorf("session %d of %d ended", i+2, len(views))
		}
	}
	if _, ok := s.Check(admin); !ok {
		t.Error("another token's session ended")
	}
	if n := len(s.byName["token:viewer"]); n != sessionsPerToken || len(s.live) != sessionsPerToken+1 {
		t.Errorf("%d sessions of the viewer, %d in all; want %d and %d", n, len(s.live), sessionsPerToken, sessionsPerToken+1)
	}
	s.Logout(views[1])
	if n := len(s.byName["token:viewer"]); n != sessionsPerToken-1 {
		t.Errorf("after a logout the viewer has %d sessions, want %d", n, sessionsPerToken-1)
	}
}

// TestSessionFlood: one token that logs in again and again, as fast as the
// login limits let it, from ever new addresses and for longer than the
// cap on all sessions needs, does not keep an admin out.
func TestSessionFlood(t *testing.T) {
	path, toks := writeTokensFile(t)
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := newSessions(tokens, 24*time.Hour)
	s.now = func() time.Time { return now }
	for i := range maxSessions {
		now = now.Add(tokenLoginEvery)
		if _, _, err := s.Login(fmt.Sprintf("10.%d.%d.1:4000", i>>8, i&0xff), toks["viewer"]); err != nil {
			t.Fatalf("login %d of the flood: %v", i+1, err)
		}
	}
	value, sess, err := s.Login(testClient, toks["admin"])
	if err != nil {
		t.Fatalf("the admin's login after a flood of one token: %v", err)
	}
	if _, ok := s.Check(value); !ok || sess.Identity.Role != RoleAdmin {
		t.Errorf("the admin's session: %+v %v", sess, ok)
	}
	if len(s.live) != sessionsPerToken+1 {
		t.Errorf("%d sessions alive, want %d of the flooding token and the admin's", len(s.live), sessionsPerToken+1)
	}
}

// TestSessionsGlobalCap: with so many tokens logged in that all sessions
// together reach their cap, a login of a new token ends the oldest session
// of a token that holds the most, never one of a token with fewer.
func TestSessionsGlobalCap(t *testing.T) {
	n := maxSessions/sessionsPerToken + 8
	var lines []string
	secrets := make([]string, n)
	for i := range secrets {
		tok, line, err := NewToken(fmt.Sprintf("view%d", i), RoleView)
		if err != nil {
			t.Fatal(err)
		}
		secrets[i] = tok
		lines = append(lines, line)
	}
	admin, line, _ := NewToken("admin", RoleAdmin)
	lines = append(lines, line)
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := newSessions(tokens, time.Hour)
	s.now = func() time.Time { return now }
	addr := 0
	for range sessionsPerToken {
		now = now.Add(tokenLoginEvery)
		for _, secret := range secrets {
			addr++
			if _, _, err := s.Login(fmt.Sprintf("10.%d.%d.%d:4000", addr>>16, addr>>8&0xff, addr&0xff), secret); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(s.live) != maxSessions {
		t.Fatalf("%d sessions alive, want the cap, %d", len(s.live), maxSessions)
	}
	before := map[string]int{}
	for name, ids := range s.byName {
		before[name] = len(ids)
	}
	value, _, err := s.Login(testClient, admin)
	if err != nil {
		t.Fatalf("an admin's login at the cap: %v", err)
	}
	if _, ok := s.Check(value); !ok || len(s.live) != maxSessions {
		t.Errorf("the admin's session works: %v; %d sessions alive, want %d", ok, len(s.live), maxSessions)
	}
	for name, had := range before {
		if has := len(s.byName[name]); has != had && had != sessionsPerToken {
			t.Errorf("token %s had %d sessions, fewer than the most, and lost one", name, had)
		}
	}
}

// TestSessionsConcurrent: logins, checks and logouts of several clients at
// once keep each token within its cap.
func TestSessionsConcurrent(t *testing.T) {
	path, toks := writeTokensFile(t)
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s := newSessions(tokens, time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				value, _, err := s.Login(fmt.Sprintf("192.0.2.%d:1", g), toks["viewer"])
				if err != nil {
					continue // the token's burst is shared by all of them
				}
				s.Check(value)
				if i%2 == 0 {
					s.Logout(value)
				}
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.byName["token:viewer"]); n > sessionsPerToken || n != len(s.live) {
		t.Errorf("%d sessions of the viewer, %d in all", n, len(s.live))
	}
}
