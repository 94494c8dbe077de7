package sso

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
)

// VerifyBearer checks an ID token sent as an API bearer credential: a JWT
// of the issuer whose audience is the dashboard's or the CLI's client.
// It returns ErrNotMine for anything else that is not a JWT of the issuer
// (a token of the tokens file, say), and an *Error for one of the issuer
// that does not verify (expired, forged, another client's).
func (c *Client) VerifyBearer(ctx context.Context, raw string) (*Login, error) {
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
			return l, nil
		}
	}
	return nil, &Error{Reason: "audience", Msg: "the ID token was issued for another client (audience)"}
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
