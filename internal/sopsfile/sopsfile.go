// Package sopsfile opens manifest files that SOPS encrypted with age, with
// the SOPS project's own packages (its core, YAML store, AES cipher and age
// key source), so that every file the sops CLI writes reads the same way
// here. It owns the age identities of the server (or of a user of
// rezusctl) and the errors a bad file gets; it must not parse manifests
// (package schema does) nor keep a decrypted value anywhere but in the
// caller's memory, and its errors never hold a decrypted value.
//
// The SOPS core package links every key service SOPS knows (AWS, GCP and
// Azure KMS, Vault, PGP) through its key service package, whichever of its
// packages is imported; only age is used here. Like the sops CLI, the
// SOPS packages read /etc/sops/audit.yaml when the program starts.
package sopsfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	sops "github.com/getsops/sops/v3"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/logging"
)

func init() {
	// The SOPS packages log to stderr through their own loggers; a
	// warning may quote a comment of the file. Nothing of a file is
	// logged here.
	for _, l := range logging.Loggers {
		l.SetOutput(io.Discard)
	}
}

// The kinds of error Decrypt returns, for errors.Is. Each error Decrypt
// returns names the file and wraps one of them.
var (
	// ErrNoIdentity: none of the identities decrypts the file's data key.
	ErrNoIdentity = errors.New("no age identity matches the file's recipients")
	// ErrMACMismatch: the file was changed after sops wrote it (a value,
	// the MAC or the data key does not authenticate).
	ErrMACMismatch = errors.New("MAC mismatch: the file was changed after sops encrypted it")
	// ErrMetadata: the file's sops metadata is missing or malformed.
	ErrMetadata = errors.New("missing or malformed sops metadata")
)

// Identities are the age identities that files are decrypted with. They
// implement schema.Decrypter, and are safe for concurrent use.
type Identities struct {
	path string
	ids  sopsage.ParsedIdentities
}

// Open reads the age identities of the key file at path, as sops reads
// SOPS_AGE_KEY_FILE: one identity a line (AGE-SECRET-KEY-1…, or a
// post-quantum or plugin identity), blank lines and lines starting with
// "#" ignored. A file that is missing, unreadable or holds no identity is
// an error that names the path.
func Open(path string) (*Identities, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("age key file: %w", err)
	}
	var ids sopsage.ParsedIdentities
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// The parser's error may quote part of the key: it is left out.
		if err := ids.Import(line); err != nil {
			return nil, fmt.Errorf("age key file %s: line %d is not an age identity", path, i+1)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("age key file %s holds no age identity (a line AGE-SECRET-KEY-1…)", path)
	}
	return &Identities{path: path, ids: ids}, nil
}

// Path returns the key file the identities were read from.
func (id *Identities) Path() string { return id.path }

// Len returns the number of identities.
func (id *Identities) Len() int { return len(id.ids) }

// recipients lists the keys a file's data key is encrypted for: the age
// recipients, and the other keys by their type and name.
func recipients(m sops.Metadata) string {
	var out []string
	for _, g := range m.KeyGroups {
		for _, k := range g {
			s := k.ToString()
			if k.TypeToIdentifier() != sopsage.KeyTypeIdentifier {
				s = k.TypeToIdentifier() + " " + s
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
