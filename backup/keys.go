package backup

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"golang.org/x/crypto/argon2"
)

// Keys encrypt and decrypt backups (age). Encryption always has a
// recipient; decryption needs an identity (restore, verification, listing
// what only the backup store knows).
type Keys struct {
	recipients []age.Recipient
	identities []age.Identity
}

// KeysFromRecipients: age recipients ("age1…", or ssh-ed25519 public keys),
// and optional identity files (age identity files, as age -i reads them, or
// unencrypted OpenSSH ed25519 private keys) for reading backups back.
func KeysFromRecipients(recipients []string, identityFiles []string) (*Keys, error) {
	k := &Keys{}
	for _, s := range recipients {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		r, err := parseRecipient(s)
		if err != nil {
			return nil, fmt.Errorf("backup recipient %q: %w", s, err)
		}
		k.recipients = append(k.recipients, r)
	}
	if len(k.recipients) == 0 {
		return nil, errors.New("backup keys: no age recipient: backups are never stored in plain text")
	}
	for _, f := range identityFiles {
		ids, err := readIdentityFile(f)
		if err != nil {
			return nil, fmt.Errorf("backup identity file %s: %w", f, err)
		}
		k.identities = append(k.identities, ids...)
	}
	return k, nil
}

func parseRecipient(s string) (age.Recipient, error) {
	switch {
	case strings.HasPrefix(s, "age1"):
		rs, err := age.ParseRecipients(strings.NewReader(s))
		if err != nil {
			return nil, err
		}
		return rs[0], nil
	case strings.HasPrefix(s, "ssh-ed25519 "):
		return agessh.ParseRecipient(s)
	}
	return nil, errors.New(`want an age recipient ("age1…") or an ssh-ed25519 public key`)
}

// readIdentityFile reads an age identity file (AGE-SECRET-KEY-… lines) or
// an OpenSSH private key. Its errors never quote the file's content.
func readIdentityFile(name string) ([]age.Identity, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<20 {
		return nil, errors.New("too long for an identity file")
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("-----BEGIN")) {
		id, err := agessh.ParseIdentity(b)
		if err != nil {
			return nil, fmt.Errorf("not a usable SSH private key (passphrase-protected keys are not supported): %w", err)
		}
		return []age.Identity{id}, nil
	}
	return age.ParseIdentities(bytes.NewReader(b))
}

// passphraseSalt fixes the key that KeysFromPassphrase derives to this use:
// the same passphrase gives other keys elsewhere (the TF state's).
const passphraseSalt = "rezuscloud etcd backups v1"

// KeysFromPassphrase derives one ed25519 key pair from the state passphrase
// (argon2id with a fixed context, done once: about 64 MiB and a fraction of
// a second) and uses it through filippo.io/age/agessh: the same passphrase
// always gives the same key, so a new server with the same passphrase reads
// old backups.
func KeysFromPassphrase(passphrase string) (*Keys, error) {
	if passphrase == "" {
		return nil, errors.New("backup keys: empty passphrase")
	}
	seed := argon2.IDKey([]byte(passphrase), []byte(passphraseSalt), 3, 64<<10, 4, ed25519.SeedSize)
	id, err := agessh.NewEd25519Identity(ed25519.NewKeyFromSeed(seed))
	if err != nil {
		return nil, fmt.Errorf("backup keys: %w", err)
	}
	return &Keys{recipients: []age.Recipient{id.Recipient()}, identities: []age.Identity{id}}, nil
}

// CanDecrypt reports whether k holds an identity, so that backups can be
// read back (listed, verified, restored).
func (k *Keys) CanDecrypt() bool { return k != nil && len(k.identities) > 0 }

// encrypt returns a writer that encrypts into dst; Close finishes the file.
func (k *Keys) encrypt(dst io.Writer) (io.WriteCloser, error) {
	return age.Encrypt(dst, k.recipients...)
}

// decrypt returns the plain reader of the age file src.
func (k *Keys) decrypt(src io.Reader) (io.Reader, error) {
	if !k.CanDecrypt() {
		return nil, errNoIdentity
	}
	return age.Decrypt(src, k.identities...)
}

var errNoIdentity = errors.New("this server has no identity to decrypt backups with (give an age identity file)")
