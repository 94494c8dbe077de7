package sso

import (
	"errors"
	"fmt"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// ErrNotMine is VerifyBearer's answer for a credential that is not a JWT
// of this client's issuer.
var ErrNotMine = errors.New("not an ID token of this provider")

// Error is a sign-in or a token that was refused. Reason is a short word
// for logs and the audit log (state, nonce, signature, expired, audience,
// issuer, ...); Msg says what happened for the person. Neither holds a
// token.
type Error struct {
	Reason string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// NoRoleError is a person whose groups the role map gives no role.
type NoRoleError struct {
	Groups []string
	Claim  string
}

func (e *NoRoleError) Error() string {
	if len(e.Groups) == 0 {
		return fmt.Sprintf("the provider lists no groups for you (claim %q), and without a mapped group there is no access", e.Claim)
	}
	return fmt.Sprintf("none of your groups (%s) is given a role, and without a mapped group there is no access", strings.Join(e.Groups, ", "))
}

// Reason returns the short word of err for logs: Error's reason,
// "no-role", or "error".
func Reason(err error) string {
	var e *Error
	var n *NoRoleError
	switch {
	case errors.As(err, &e):
		return e.Reason
	case errors.As(err, &n):
		return "no-role"
	}
	return "error"
}

// verifyError turns go-oidc's refusal into an Error that says which check
// failed.
func verifyError(err error) error {
	var exp *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &exp):
		return &Error{Reason: "expired", Msg: fmt.Sprintf("the ID token expired at %s; sign in again", exp.Expiry.UTC().Format("2006-01-02T15:04:05Z"))}
	case strings.Contains(msg, "signature"):
		return &Error{Reason: "signature", Msg: "the ID token's signature does not verify with the provider's keys"}
	case strings.Contains(msg, "issued by a different provider"):
		return &Error{Reason: "issuer", Msg: "the ID token was issued by another provider"}
	case strings.Contains(msg, "audience"):
		return &Error{Reason: "audience", Msg: "the ID token was issued for another client (audience)"}
	}
	return &Error{Reason: "invalid", Msg: "the ID token is not valid: " + msg}
}

// exchangeError says why the provider refused a code or a refresh token,
// without the request.
func exchangeError(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return strings.TrimSpace(re.ErrorCode + " " + re.ErrorDescription)
		}
		return re.Response.Status
	}
	return err.Error()
}
