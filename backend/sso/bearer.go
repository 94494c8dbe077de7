package sso

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"
)

// VerifyBearer checks an ID token sent as an API bearer credential: a JWT
// of the issuer whose audience is the dashboard's or the CLI's client.
// It returns ErrNotMine for anything else that is not a JWT of the issuer
// (a token of the tokens file, say), and an *Error for one of the issuer
// that does not verify (expired, forged, another client's).
//
// A token that verified is remembered (by its hash) until it expires, at
// most bearerCacheTTL, so that a client that sends it with every request
// pays for its signature once.
func (c *Client) VerifyBearer(ctx context.Context, raw string) (*Login, error) {
	sum := sha256.Sum256([]byte(raw))
	if l := c.bearers.get(sum, c.cfg.Now()); l != nil {
		return l, nil
	}
	iss, aud, ok := peek(raw)
	if !ok || iss != c.cfg.Issuer {
		return nil, ErrNotMine
	}
	l, err := c.verify(ctx, c.bearer, raw, "")
	if err != nil {
		return l, err
	}
	for _, a := range []string{c.cfg.ClientID, c.cfg.CLIClientID} {
		if a != "" && slices.Contains(aud, a) {
			l.client = a
			c.bearers.put(sum, l, c.cfg.Now())
			return l, nil
		}
	}
	return nil, &Error{Reason: "audience", Msg: "the ID token was issued for another client (audience)"}
}

// The bounds of the verified bearers remembered: how many, and for how
// long at most.
const (
	bearerCacheSize = 4096
	bearerCacheTTL  = 5 * time.Minute
)

// bearerCache remembers verified bearer ID tokens by their SHA-256.
type bearerCache struct {
	mu   sync.Mutex
	seen map[[sha256.Size]byte]bearerEntry
}

type bearerEntry struct {
	l     *Login
	until time.Time
}

func (bc *bearerCache) get(sum [sha256.Size]byte, now time.Time) *Login {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	e, ok := bc.seen[sum]
	if !ok || !now.Before(e.until) {
		return nil
	}
	return e.l
}

func (bc *bearerCache) put(sum [sha256.Size]byte, l *Login, now time.Time) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.seen == nil || len(bc.seen) >= bearerCacheSize {
		bc.seen = map[[sha256.Size]byte]bearerEntry{}
	}
	until := now.Add(bearerCacheTTL)
	if l.Expires.Before(until) {
		until = l.Expires
	}
	bc.seen[sum] = bearerEntry{l: l, until: until}
}

// peek reads a JWT's issuer and audience without verifying anything, to
// tell the provider's tokens from other credentials.
func peek(raw string) (iss string, aud []string, ok bool) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", nil, false
	}
	var claims struct {
		Iss string          `json:"iss"`
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(b, &claims) != nil {
		return "", nil, false
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		aud = []string{one}
	} else {
		json.Unmarshal(claims.Aud, &aud)
	}
	return claims.Iss, aud, true
}
