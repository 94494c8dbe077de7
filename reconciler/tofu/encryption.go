package tofu

import (
	"errors"
	"fmt"
	"strings"
)

// MinPassphrase is the shortest state passphrase OpenTofu's pbkdf2 key
// provider accepts.
const MinPassphrase = 16

// EncryptionConfig returns the body of OpenTofu's encryption block, for the
// TF_ENCRYPTION variable, that encrypts state and plans with a key derived
// from passphrase (pbkdf2, then AES-GCM). With migrate, state and plans that
// are not encrypted yet are still read (a fallback), so an installation that
// ran without encryption switches over without losing anything: each
// tenant's state is encrypted the next time it is written.
func EncryptionConfig(passphrase string, migrate bool) (string, error) {
	if len(passphrase) < MinPassphrase {
		return "", fmt.Errorf("state passphrase has %d characters; OpenTofu needs at least %d", len(passphrase), MinPassphrase)
	}
	if strings.ContainsAny(passphrase, "\"\\\n$%") {
		return "", errors.New(`state passphrase may not contain quotes, backslashes, newlines, "$" or "%"`)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "key_provider \"pbkdf2\" \"rezuscloud\" {\n  passphrase = \"%s\"\n  iterations = 200000\n  hash_function = \"sha256\"\n}\n", passphrase)
	b.WriteString("method \"aes_gcm\" \"rezuscloud\" {\n  keys = key_provider.pbkdf2.rezuscloud\n}\n")
	if migrate {
		b.WriteString("method \"unencrypted\" \"migrate\" {}\n")
	}
	for _, target := range []string{"state", "plan"} {
		fmt.Fprintf(&b, "%s {\n  method = method.aes_gcm.rezuscloud\n", target)
		if migrate {
			b.WriteString("  fallback {\n    method = method.unencrypted.migrate\n  }\n")
		} else {
			b.WriteString("  enforced = true\n")
		}
		b.WriteString("}\n")
	}
	return b.String(), nil
}
