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
	"path/filepath"
	"runtime"
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
	id := &Identities{path: path}
	if err := id.readFile(path); err != nil {
		return nil, err
	}
	if len(id.ids) == 0 {
		return nil, fmt.Errorf("age key file %s holds no age identity (a line AGE-SECRET-KEY-1…)", path)
	}
	return id, nil
}

// readFile adds the identities of the key file at path.
func (id *Identities) readFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("age key file: %w", err)
	}
	return id.parse(string(data), "age key file "+path, false)
}

// parse adds the identities of text, one a line, or with words several
// a line (as sops reads SOPS_AGE_KEY); where names the text in errors.
func (id *Identities) parse(text, where string, words bool) error {
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys := []string{line}
		if words {
			keys = strings.Fields(line)
		}
		for _, k := range keys {
			// The parser's error may quote part of the key: it is left out.
			if err := id.ids.Import(k); err != nil {
				return fmt.Errorf("%s: line %d is not an age identity", where, i+1)
			}
		}
	}
	return nil
}

// The environment variables and the file where sops looks for a user's
// age identities.
const (
	EnvKeyFile = sopsage.SopsAgeKeyFileEnv // SOPS_AGE_KEY_FILE
	EnvKey     = sopsage.SopsAgeKeyEnv     // SOPS_AGE_KEY
	// UserKeyFile is the key file under the user's configuration
	// directory (~/.config/sops/age/keys.txt on Linux).
	UserKeyFile = sopsage.SopsAgeKeyUserConfigPath
)

// FromEnvironment reads a user's age identities where the sops CLI finds
// them: the keys of SOPS_AGE_KEY, the file SOPS_AGE_KEY_FILE names, and
// UserKeyFile under the user's configuration directory when it exists
// (sops also runs SOPS_AGE_KEY_CMD and reads SSH keys; this does not). It
// returns nil and no error when there is none; a file that
// SOPS_AGE_KEY_FILE names but cannot be read is an error. Path tells
// where the identities came from.
func FromEnvironment() (*Identities, error) {
	id := &Identities{}
	var from []string
	if v, ok := os.LookupEnv(EnvKey); ok {
		if err := id.parse(v, EnvKey, true); err != nil {
			return nil, err
		}
		from = append(from, EnvKey)
	}
	if v, ok := os.LookupEnv(EnvKeyFile); ok && v != "" {
		if err := id.readFile(v); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvKeyFile, err)
		}
		from = append(from, v)
	}
	if dir, err := userConfigDir(); err == nil {
		p := filepath.Join(dir, filepath.FromSlash(UserKeyFile))
		if _, err := os.Stat(p); err == nil {
			if err := id.readFile(p); err != nil {
				return nil, err
			}
			from = append(from, p)
		}
	}
	if len(id.ids) == 0 {
		return nil, nil
	}
	id.path = strings.Join(from, ", ")
	return id, nil
}

// userConfigDir is the directory sops finds UserKeyFile in: on macOS
// XDG_CONFIG_HOME when set, else os.UserConfigDir.
func userConfigDir() (string, error) {
	if runtime.GOOS == "darwin" {
		if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
			return d, nil
		}
	}
	return os.UserConfigDir()
}

// Path returns where the identities were read from: the key file, or
// the places FromEnvironment found them.
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
