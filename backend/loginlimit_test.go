package backend

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// limitRig is Sessions on a clock the test moves.
type limitRig struct {
	t    *testing.T
	s    *Sessions
	toks testTokens
	now  time.Time
}

func newLimitRig(t *testing.T) *limitRig {
	path, toks := writeTokensFile(t)
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &limitRig{t: t, s: newSessions(tokens, time.Hour), toks: toks, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	r.s.now = func() time.Time { return r.now }
	return r
}

// limited asserts that err is a LoginLimitError that waits want and says
// why, and returns it.
func (r *limitRig) limited(what string, err error, invalid bool, why string, want time.Duration) {
	r.t.Helper()
	var lim *LoginLimitError
	if !errors.As(err, &lim) {
		r.t.Fatalf("%s: %v, want a LoginLimitError", what, err)
	}
	if lim.Invalid != invalid || lim.Why != why || lim.Wait != want {
		r.t.Fatalf("%s: %+v, want Invalid %v, %q, wait %v", what, lim, invalid, why, want)
	}
	if invalid != errors.Is(err, errBadCredentials) {
		r.t.Fatalf("%s: errors.Is(err, errBadCredentials) = %v", what, !invalid)
	}
}

// TestLoginBackoff: failed logins from one address are free five times in
// a row; each further one makes the address wait twice as long as the last,
// up to 15 minutes, and a waiting address gets nowhere, even with a valid
// token, while another address logs in. The wait lifts when it has passed,
// and the count starts again an hour after the last failure.
func TestLoginBackoff(t *testing.T) {
	r := newLimitRig(t)
	const typo, other = "192.0.2.7:50000", "192.0.2.8:50000"
	for i := range freeFailures {
		if _, _, err := r.s.Login(typo, "wrong"); !errors.Is(err, errBadCredentials) || errors.As(err, new(*LoginLimitError)) {
			t.Fatalf("failure %d: %v, want a plain bad credential", i+1, err)
		}
	}
	const failed = "too many failed logins from your address"
	want := failBackoff
	for want < maxFailBackoff {
		_, _, err := r.s.Login(typo, "wrong")
		r.limited("a failure past the free ones", err, true, failed, want)
		r.now = r.now.Add(want - time.Millisecond)
		_, _, err = r.s.Login(typo, r.toks["viewer"])
		r.limited("a valid login before the wait is over", err, false, failed, time.Millisecond)
		if _, _, err := r.s.Login(other, r.toks["admin"]); err != nil {
			t.Fatalf("a login from another address while one waits: %v", err)
		}
		r.now = r.now.Add(time.Millisecond)
		want *= 2
	}
	_, _, err := r.s.Login(typo, "wrong")
	r.limited("the longest wait", err, true, failed, maxFailBackoff)
	r.now = r.now.Add(maxFailBackoff)
	_, _, err = r.s.Login(typo, "wrong")
	r.limited("a failure at the longest wait", err, true, failed, maxFailBackoff)
	r.now = r.now.Add(maxFailBackoff)
	if _, _, err := r.s.Login(typo, r.toks["viewer"]); err != nil {
		t.Fatalf("a valid login after the wait: %v", err)
	}

	r.now = r.now.Add(failMemory)
	for i := range freeFailures {
		if _, _, err := r.s.Login(typo, "wrong"); errors.As(err, new(*LoginLimitError)) {
			t.Fatalf("failure %d an hour after the last: %v, want a free one", i+1, err)
		}
	}
}

// TestLoginRate: one address may try 20 logins at once, then one every
// 3 seconds; one token may log in 10 times at once, then once every
// 6 seconds, from whatever address.
func TestLoginRate(t *testing.T) {
	r := newLimitRig(t)
	const office = "198.51.100.1:1"
	names := []string{"viewer", "editor", "editor2", "admin"}
	for i := range loginBurst {
		if _, _, err := r.s.Login(office, r.toks[names[i%len(names)]]); err != nil {
			t.Fatalf("login %d from one address: %v", i+1, err)
		}
	}
	_, _, err := r.s.Login(office, r.toks["admin"])
	r.limited("a login past the burst of one address", err, false, "too many logins from your address", loginEvery)
	r.now = r.now.Add(loginEvery)
	if _, _, err := r.s.Login(office, r.toks["admin"]); err != nil {
		t.Fatalf("a login once the address's wait is over: %v", err)
	}

	r.now = r.now.Add(time.Hour)
	for i := range tokenLoginBurst {
		if _, _, err := r.s.Login(fmt.Sprintf("203.0.113.%d:1", i), r.toks["viewer"]); err != nil {
			t.Fatalf("login %d of one token: %v", i+1, err)
		}
	}
	_, _, err = r.s.Login("203.0.113.200:1", r.toks["viewer"])
	r.limited("a login past the burst of one token", err, false, "too many logins with this token", tokenLoginEvery)
	if _, _, err := r.s.Login("203.0.113.200:1", r.toks["admin"]); err != nil {
		t.Fatalf("another token's login meanwhile: %v", err)
	}
	r.now = r.now.Add(tokenLoginEvery)
	if _, _, err := r.s.Login("203.0.113.201:1", r.toks["viewer"]); err != nil {
		t.Fatalf("the token's login once its wait is over: %v", err)
	}
}

// TestLoginLimitsBounded: an attacker who rotates addresses (a /64 each)
// leaves the limits with at most maxLimitEntries entries; a full table
// forgets the entries at rest first and keeps the ones that make a client
// wait.
func TestLoginLimitsBounded(t *testing.T) {
	r := newLimitRig(t)
	for i := range 100_000 {
		r.s.Login(fmt.Sprintf("[2001:db8:%x:%x::1]:443", i>>16, i&0xffff), "wrong")
		if n := len(r.s.limits.clients.m); n > maxLimitEntries {
			t.Fatalf("after %d addresses the limits hold %d entries, more than %d", i+1, n, maxLimitEntries)
		}
	}
	if n := len(r.s.limits.clients.m); n < maxLimitEntries*3/4 {
		t.Errorf("the limits hold %d entries, fewer than they may keep", n)
	}

	l := newLoginLimits()
	l.clients.max = 8
	for range freeFailures + 1 {
		l.failed("192.0.2.1", r.now, errBadCredentials)
	}
	for i := range 7 {
		l.client(fmt.Sprintf("192.0.2.%d", 10+i), r.now)
	}
	if err := l.admit("192.0.2.99", r.now); err != nil {
		t.Fatal(err)
	}
	if len(l.clients.m) != 2 {
		t.Errorf("a full table of entries at rest keeps %d entries, want the waiting one and the new one", len(l.clients.m))
	}
	var lim *LoginLimitError
	if err := l.admit("192.0.2.1", r.now); !errors.As(err, &lim) {
		t.Errorf("the waiting address after the table was full: %v, want it still waits", err)
	}
}

// TestClientKey: limits key a client by its IP address, an IPv6 client
// by its /64.
func TestClientKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:50000":              "192.0.2.7",
		"[::ffff:192.0.2.7]:1":         "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:2::9%eth0]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:443":        "2001:db8:1:3::/64",
		"127.0.0.1:5555":               "127.0.0.1",
		"@":                            "@",
		"not an address, but a socket": "not an address, but a socket",
	} {
		if got := clientKey(addr); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}
