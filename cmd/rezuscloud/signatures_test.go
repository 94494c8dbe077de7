package main

import (
	"strings"
	"testing"
)

// TestSignatureVerifierFlags: the flags of signed commits only make sense
// together, and with --repo.
func TestSignatureVerifierFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		f    serveFlags
		want string
	}{
		{"keys without the flag", serveFlags{repo: "git://127.0.0.1/r", allowedSigners: "a"}, "need --verify-signatures"},
		{"force pushes allowed without the flag", serveFlags{repo: "git://127.0.0.1/r", allowNonFastForward: true}, "--allow-non-fast-forward needs --verify-signatures"},
		{"no keys", serveFlags{repo: "git://127.0.0.1/r", verifySignatures: true}, "needs --allowed-signers FILE"},
		{"a directory", serveFlags{dir: "m", verifySignatures: true, allowedSigners: "a"}, "needs --repo"},
		{"a missing file", serveFlags{repo: "git://127.0.0.1/r", verifySignatures: true, gpgKeyring: "/nonexistent/keyring.asc"}, "GPG keyring: open /nonexistent/keyring.asc"},
	} {
		_, err := signatureVerifier(&c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if v, err := signatureVerifier(&serveFlags{repo: "git://127.0.0.1/r"}); v != nil || err != nil {
		t.Errorf("without --verify-signatures: %v %v, want no verifier", v, err)
	}
}
