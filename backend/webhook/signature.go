package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// SignatureHeader carries the HMAC-SHA256 of the raw body, as GitHub,
// Gitea and Forgejo send it: "sha256=<hex>".
const SignatureHeader = "X-Hub-Signature-256"

// TokenHeader carries GitLab's secret token.
const TokenHeader = "X-Gitlab-Token"

// Sign returns the value of SignatureHeader for body: what a sender
// computes, and what scripts calling the generic hook must send.
func Sign(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, body))
}

func mac(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// verifyHMAC checks SignatureHeader against the body in constant time.
func verifyHMAC(h http.Header, body, secret []byte) *hookError {
	vals := h.Values(SignatureHeader)
	switch {
	case len(vals) == 0 && h.Get("X-Hub-Signature") != "":
		return unauthorized("only %s (HMAC-SHA256) is accepted; X-Hub-Signature (HMAC-SHA1) is not: choose SHA-256 signing in the forge", SignatureHeader)
	case len(vals) == 0:
		return unauthorized("missing %s header: sign the raw body with HMAC-SHA256 and the webhook secret and send sha256=<hex>", SignatureHeader)
	case len(vals) > 1:
		return unauthorized("more than one %s header", SignatureHeader)
	}
	v := strings.TrimSpace(vals[0])
	hexSum, ok := strings.CutPrefix(v, "sha256=")
	if !ok {
		return unauthorized("%s must be sha256=<hex>, not %s", SignatureHeader, describePrefix(v))
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil || len(got) != sha256.Size {
		return unauthorized("%s must be sha256= and %d hex digits", SignatureHeader, 2*sha256.Size)
	}
	if !hmac.Equal(got, mac(secret, body)) {
		return unauthorized("%s does not match the body: the secret differs, or the body changed on the way", SignatureHeader)
	}
	return nil
}

// describePrefix names the algorithm prefix of a signature header, such
// as "sha1=", without repeating anything else the caller sent.
func describePrefix(v string) string {
	algo, _, ok := strings.Cut(v, "=")
	if !ok || algo == "" || len(algo) > 10 || strings.IndexFunc(algo, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-')
	}) >= 0 {
		return "a value without an algorithm prefix"
	}
	return `"` + algo + `="`
}

// verifyToken compares TokenHeader with the secret in constant time. Both
// are hashed first, so the comparison does not reveal the secret's length.
func verifyToken(h http.Header, secret []byte) *hookError {
	vals := h.Values(TokenHeader)
	switch {
	case len(vals) == 0:
		return unauthorized("missing %s header: set the webhook's secret token in GitLab to the webhook secret", TokenHeader)
	case len(vals) > 1:
		return unauthorized("more than one %s header", TokenHeader)
	}
	got := sha256.Sum256([]byte(vals[0]))
	want := sha256.Sum256(secret)
	if !hmac.Equal(got[:], want[:]) {
		return unauthorized("%s does not match the webhook secret", TokenHeader)
	}
	return nil
}

func unauthorized(format string, args ...any) *hookError {
	return refuse(ResultUnauthorized, http.StatusUnauthorized, format, args...)
}
