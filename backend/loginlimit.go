package backend

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rezuscloud/rezuscloud/internal/backoff"
)

// The limits on dashboard logins.
const (
	// loginBurst attempts may come from one client address at once;
	// after them one every loginEvery.
	loginBurst = 20
	loginEvery = 3 * time.Second
	// tokenLoginBurst successful logins may use one token at once;
	// after them one every tokenLoginEvery.
	tokenLoginBurst = 10
	tokenLoginEvery = 6 * time.Second
	// freeFailures failed logins in a row from one address cost
	// nothing; each further one makes the address wait failBackoff,
	// doubled each time, at most maxFailBackoff. The count starts
	// again failMemory after the last failure, which is longer than
	// the longest wait, so that waiting it out does not start it again.
	freeFailures   = 5
	failBackoff    = time.Second
	maxFailBackoff = 15 * time.Minute
	failMemory     = time.Hour
	// maxLimitEntries bounds the clients and the tokens whose logins
	// are remembered; see limitTable.
	maxLimitEntries = 4096
)

// failPolicy is the wait of an address after each failed login beyond
// the free ones, without jitter.
var failPolicy = backoff.Policy{Base: failBackoff, Max: maxFailBackoff}

// LoginLimitError is Login's answer to a client that must wait before it
// logs in again: too many attempts from its address, too many failed ones,
// or too many logins with one token.
type LoginLimitError struct {
	// Wait is how long until the next attempt may go through.
	Wait time.Duration
	// Why says which limit was reached.
	Why string
	// Invalid is set when the attempt was checked and its token is not
	// valid; this failure is what makes the client wait.
	Invalid bool
}

func (e *LoginLimitError) Error() string {
	return fmt.Sprintf("%s: try again in %s", e.Why, waitText(e.Wait))
}

// Unwrap makes an Invalid error match the error of a failed check.
func (e *LoginLimitError) Unwrap() error {
	if e.Invalid {
		return errBadCredentials
	}
	return nil
}

// RetryAfter is Wait in whole seconds, rounded up, for a Retry-After
// header.
func (e *LoginLimitError) RetryAfter() int {
	return max(1, int((e.Wait+time.Second-1)/time.Second))
}

// waitText says d to a person: seconds up to two minutes, then minutes,
// rounded up.
func waitText(d time.Duration) string {
	n, unit := int((d+time.Second-1)/time.Second), "second"
	if n >= 120 {
		n, unit = int((d+time.Minute-1)/time.Minute), "minute"
	}
	if n <= 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// loginLimits are the rate limits on logins: per client address (every
// attempt, and a backoff after failed ones) and per token (successful
// logins). The caller passes the time, so that its clock rules them.
// loginLimits is safe for concurrent use.
type loginLimits struct {
	mu      sync.Mutex
	clients limitTable[*clientLimit]
	tokens  limitTable[*rate.Limiter]
	// users holds the failed logins of each local user name, from any
	// address; only its backoff is used.
	users limitTable[*clientLimit]
}

// clientLimit is what the limits remember of one client address.
type clientLimit struct {
	attempts *rate.Limiter
	fails    int       // failed logins in a row
	lastFail time.Time // of the last failed login
	until    time.Time // no attempt before this
}

func newLoginLimits() *loginLimits {
	rest := func(c *clientLimit, now time.Time) bool {
		return !now.Before(c.until) && (c.fails == 0 || now.Sub(c.lastFail) >= failMemory) && atRest(c.attempts, now)
	}
	return &loginLimits{
		clients: newLimitTable(maxLimitEntries, rest),
		tokens:  newLimitTable(maxLimitEntries, atRest),
		users:   newLimitTable(maxLimitEntries, rest),
	}
}

// atRest reports whether lim is full again, so that forgetting it changes
// nothing.
func atRest(lim *rate.Limiter, now time.Time) bool {
	return lim.TokensAt(now) >= float64(lim.Burst())
}

// admit takes one attempt of client's budget, or says how long the
// client must wait.
func (l *loginLimits) admit(client string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.client(client, now)
	if now.Before(c.until) {
		return &LoginLimitError{Wait: c.until.Sub(now), Why: "too many failed logins from your address"}
	}
	if wait := take(c.attempts, now); wait > 0 {
		return &LoginLimitError{Wait: wait, Why: "too many logins from your address"}
	}
	return nil
}

// failed counts a failed login of client and returns the error to answer
// it with: err itself, or once the free failures are used up, a
// LoginLimitError that says how long the client must wait.
func (l *loginLimits) failed(client string, now time.Time, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wait := l.client(client, now).fail(now); wait > 0 {
		return &LoginLimitError{Wait: wait, Why: "too many failed logins from your address", Invalid: true}
	}
	return err
}

// fail counts a failed login and returns how long its client or user must
// wait now: nothing for the first freeFailures in a row, then failPolicy.
func (c *clientLimit) fail(now time.Time) time.Duration {
	if now.Sub(c.lastFail) >= failMemory {
		c.fails = 0
	}
	c.fails++
	c.lastFail = now
	if c.fails <= freeFailures {
		return 0
	}
	wait := failPolicy.Delay(c.fails - freeFailures)
	c.until = now.Add(wait)
	return wait
}

// admitUser says how long logins as the local user name must wait after
// failed ones, from any address.
func (l *loginLimits) admitUser(name string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u, ok := l.users.m[name]; ok && now.Before(u.until) {
		return &LoginLimitError{Wait: u.until.Sub(now), Why: "too many failed logins as this user"}
	}
	return nil
}

// failedUser counts a failed login as the local user name, from client,
// and returns the error to answer it with: err, or a LoginLimitError once
// the address's or the user's free failures are used up, with the longer
// of the two waits.
func (l *loginLimits) failedUser(client, name string, now time.Time, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	byClient := l.client(client, now).fail(now)
	byUser := l.users.get(name, now, func() *clientLimit {
		return &clientLimit{attempts: rate.NewLimiter(rate.Inf, 1)}
	}).fail(now)
	switch {
	case byUser > byClient:
		return &LoginLimitError{Wait: byUser, Why: "too many failed logins as this user", Invalid: true}
	case byClient > 0:
		return &LoginLimitError{Wait: byClient, Why: "too many failed logins from your address", Invalid: true}
	}
	return err
}

// succeededUser forgets the failed logins of the local user name, whose
// password was just given.
func (l *loginLimits) succeededUser(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.users.m, name)
}

// admitToken takes one login of the named token's budget, or says how
// long its holders must wait.
func (l *loginLimits) admitToken(name string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.tokens.get(name, now, func() *rate.Limiter {
		return rate.NewLimiter(rate.Every(tokenLoginEvery), tokenLoginBurst)
	})
	if wait := take(lim, now); wait > 0 {
		return &LoginLimitError{Wait: wait, Why: "too many logins with this token"}
	}
	return nil
}

func (l *loginLimits) client(key string, now time.Time) *clientLimit {
	return l.clients.get(key, now, func() *clientLimit {
		return &clientLimit{attempts: rate.NewLimiter(rate.Every(loginEvery), loginBurst)}
	})
}

// take takes one token from lim at now, or takes nothing and returns how
// long until one is there.
func take(lim *rate.Limiter, now time.Time) time.Duration {
	r := lim.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return wait
	}
	return 0
}

// clientKey is the key of the limits for a request from addr (its
// RemoteAddr): the IP address, or for IPv6 its /64, which one client
// usually holds whole. The server does not read X-Forwarded-For: behind a
// proxy, every client has the proxy's address.
func clientKey(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// limitTable is a map of limit states that holds at most max entries, so
// that a client rotating addresses or names cannot grow it without bound.
// A full table first forgets the entries at rest, which carry nothing;
// when that frees less than a quarter of it, it forgets arbitrary entries
// until it does, which only ever lets their clients off early. Each
// sweep so frees room for max/4 new entries.
type limitTable[V any] struct {
	max  int
	m    map[string]V
	rest func(V, time.Time) bool
}

func newLimitTable[V any](max int, rest func(V, time.Time) bool) limitTable[V] {
	return limitTable[V]{max: max, m: map[string]V{}, rest: rest}
}

// get returns the entry of key, made with fresh when there is none.
func (t *limitTable[V]) get(key string, now time.Time, fresh func() V) V {
	if v, ok := t.m[key]; ok {
		return v
	}
	if len(t.m) >= t.max {
		t.shrink(now)
	}
	v := fresh()
	t.m[key] = v
	return v
}

func (t *limitTable[V]) shrink(now time.Time) {
	for k, v := range t.m {
		if t.rest(v, now) {
			delete(t.m, k)
		}
	}
	for k := range t.m {
		if len(t.m) <= t.max*3/4 {
			break
		}
		delete(t.m, k)
	}
}
