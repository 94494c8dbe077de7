package sources

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"os"
	"path"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
)

// Signature types of Signature.Type.
const (
	SignatureSSH = "ssh"
	SignatureGPG = "gpg"
)

// sshNamespace is the sshsig namespace git signs commits in.
const sshNamespace = "git"

// Signature is the outcome of checking a commit's signature against the
// trusted keys: whether it is signed, by which key and whom, and whether
// that key is trusted. Its text fields are bounded to commitmsg.MaxLine.
type Signature struct {
	// Type is SignatureSSH or SignatureGPG; "" for an unsigned commit.
	Type string `json:"type,omitempty"`
	// Key is the signing key's fingerprint: SHA256:... for SSH, the hex
	// fingerprint (or key ID) for GPG; "" when unsigned.
	Key string `json:"key,omitempty"`
	// Signer is the principal of allowed_signers or the GPG identity
	// ("Name <email>") that the key belongs to; "" for an untrusted key.
	Signer string `json:"signer,omitempty"`
	// Verified is true when a trusted key made a valid signature.
	Verified bool `json:"verified"`
	// Reason says why the signature is not verified; "" when it is.
	Reason string `json:"reason,omitempty"`
}

// Verifier checks commit signatures against trusted keys: SSH keys of an
// OpenSSH allowed_signers file and the keys of an armored GPG keyring.
type Verifier struct {
	signers []allowedSigner
	keyring openpgp.EntityList
	armored string
}

// NewVerifier reads the allowed_signers file and the armored GPG keyring;
// either may be "", not both.
func NewVerifier(allowedSigners, gpgKeyring string) (*Verifier, error) {
	if allowedSigners == "" && gpgKeyring == "" {
		return nil, errors.New("signature verification needs an allowed signers file or a GPG keyring")
	}
	v := &Verifier{}
	if allowedSigners != "" {
		b, err := os.ReadFile(allowedSigners)
		if err != nil {
			return nil, fmt.Errorf("allowed signers: %w", err)
		}
		if v.signers, err = parseAllowedSigners(allowedSigners, b); err != nil {
			return nil, err
		}
	}
	if gpgKeyring != "" {
		b, err := os.ReadFile(gpgKeyring)
		if err != nil {
			return nil, fmt.Errorf("GPG keyring: %w", err)
		}
		if v.keyring, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("GPG keyring %s: %w", gpgKeyring, err)
		}
		v.armored = string(b)
	}
	return v, nil
}

// Verify checks the signature of commit; the signed payload is the commit
// object without its gpgsig header.
func (v *Verifier) Verify(c *object.Commit) Signature {
	sig := c.PGPSignature
	var s Signature
	switch {
	case sig == "":
		s = Signature{Reason: "the commit is not signed"}
	case strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----"):
		s = v.verifySSH(c, sig)
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		s = v.verifyGPG(c, sig)
	default:
		s = Signature{Reason: "the commit's signature is neither SSH nor GPG"}
	}
	s.Key, _ = commitmsg.BoundLine(s.Key, commitmsg.MaxLine)
	s.Signer, _ = commitmsg.BoundLine(s.Signer, commitmsg.MaxLine)
	s.Reason, _ = commitmsg.BoundLine(s.Reason, commitmsg.MaxLine)
	return s
}

// payload returns the commit object as it was signed.
func payload(c *object.Commit) ([]byte, error) {
	o := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(o); err != nil {
		return nil, err
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(r)
	return b.Bytes(), err
}

func (v *Verifier) verifyGPG(c *object.Commit, sig string) Signature {
	s := Signature{Type: SignatureGPG}
	if block, err := armor.Decode(strings.NewReader(sig)); err == nil {
		if p, err := packet.Read(block.Body); err == nil {
			if ps, ok := p.(*packet.Signature); ok {
				switch {
				case len(ps.IssuerFingerprint) > 0:
					s.Key = fmt.Sprintf("%X", ps.IssuerFingerprint)
				case ps.IssuerKeyId != nil:
					s.Key = fmt.Sprintf("%016X", *ps.IssuerKeyId)
				}
			}
		}
	}
	if v.armored == "" {
		s.Reason = "GPG signatures are not trusted here: no GPG keyring is configured"
		return s
	}
	e, err := c.Verify(v.armored)
	if err != nil {
		s.Reason = "not signed by a key of the GPG keyring: " + err.Error()
		return s
	}
	for name := range e.Identities {
		if s.Signer == "" || name < s.Signer {
			s.Signer = name
		}
	}
	s.Verified = true
	return s
}

func (v *Verifier) verifySSH(c *object.Commit, armored string) Signature {
	s := Signature{Type: SignatureSSH}
	sig, err := parseSSHSig(armored)
	if err != nil {
		s.Reason = "unreadable SSH signature: " + err.Error()
		return s
	}
	s.Key = ssh.FingerprintSHA256(sig.pub)
	if sig.namespace != sshNamespace {
		s.Reason = fmt.Sprintf("SSH signature in namespace %q, want %q", sig.namespace, sshNamespace)
		return s
	}
	msg, err := payload(c)
	if err != nil {
		s.Reason = "encode the commit: " + err.Error()
		return s
	}
	if err := sig.verify(msg); err != nil {
		s.Reason = "bad SSH signature: " + err.Error()
		return s
	}
	if len(v.signers) == 0 {
		s.Reason = "SSH signatures are not trusted here: no allowed signers file is configured"
		return s
	}
	key := sig.pub.Marshal()
	for _, a := range v.signers {
		if !bytes.Equal(a.key.Marshal(), key) {
			continue
		}
		if !a.allows(sshNamespace) {
			s.Reason = fmt.Sprintf("the key of %s (%s) is not allowed to sign in namespace %q", a.principals, a.where, sshNamespace)
			continue
		}
		s.Signer, s.Verified, s.Reason = a.principals, true, ""
		return s
	}
	if s.Reason == "" {
		s.Reason = "the SSH key is not in the allowed signers file"
	}
	return s
}

// sshSig is a parsed sshsig blob (OpenSSH's PROTOCOL.sshsig).
type sshSig struct {
	pub       ssh.PublicKey
	namespace string
	hashAlg   string
	sig       *ssh.Signature
}

// parseSSHSig reads an armored SSH SIGNATURE.
func parseSSHSig(armored string) (*sshSig, error) {
	body := strings.TrimSpace(armored)
	body = strings.TrimPrefix(body, "-----BEGIN SSH SIGNATURE-----")
	body, ok := strings.CutSuffix(strings.TrimSpace(body), "-----END SSH SIGNATURE-----")
	if !ok {
		return nil, errors.New("no END SSH SIGNATURE line")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(body), ""))
	if err != nil {
		return nil, fmt.Errorf("base64: %w", err)
	}
	var blob struct {
		Magic     [6]byte
		Version   uint32
		PublicKey []byte
		Namespace string
		Reserved  string
		HashAlg   string
		Signature []byte
	}
	if err := ssh.Unmarshal(raw, &blob); err != nil {
		return nil, err
	}
	if string(blob.Magic[:]) != "SSHSIG" || blob.Version != 1 {
		return nil, fmt.Errorf("not an SSHSIG of version 1")
	}
	pub, err := ssh.ParsePublicKey(blob.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	sig := new(ssh.Signature)
	if err := ssh.Unmarshal(blob.Signature, sig); err != nil {
		return nil, fmt.Errorf("signature: %w", err)
	}
	return &sshSig{pub: pub, namespace: blob.Namespace, hashAlg: blob.HashAlg, sig: sig}, nil
}

// verify checks the signature over msg: the key signed the SSHSIG
// preamble, namespace, hash algorithm and hash of msg.
func (s *sshSig) verify(msg []byte) error {
	if s.sig.Format == ssh.KeyAlgoRSA {
		// As OpenSSH's ssh-keygen -Y verify: SHA-1 is not accepted.
		return fmt.Errorf("RSA signature with SHA-1 (ssh-rsa), which is not accepted: sign with rsa-sha2-512")
	}
	if s.hashAlg != "sha256" && s.hashAlg != "sha512" {
		return fmt.Errorf("hash algorithm %q", s.hashAlg)
	}
	return s.pub.Verify(s.signedData(msg), s.sig)
}

// signedData is what an SSH signature of msg signs (PROTOCOL.sshsig): the
// magic preamble, the namespace and the hash of msg.
func (s *sshSig) signedData(msg []byte) []byte {
	var h hash.Hash = sha256.New()
	if s.hashAlg == "sha512" {
		h = sha512.New()
	}
	h.Write(msg)
	signed := ssh.Marshal(struct {
		Namespace string
		Reserved  string
		HashAlg   string
		Hash      []byte
	}{s.namespace, "", s.hashAlg, h.Sum(nil)})
	return append([]byte("SSHSIG"), signed...)
}

// allowedSigner is one line of an allowed_signers file.
type allowedSigner struct {
	principals string
	namespaces []string // patterns; none means every namespace
	key        ssh.PublicKey
	where      string // file:line
}

func (a allowedSigner) allows(ns string) bool {
	if a.namespaces == nil {
		return true
	}
	for _, p := range a.namespaces {
		if ok, _ := path.Match(p, ns); ok {
			return true
		}
	}
	return false
}

// parseAllowedSigners reads the format of ssh-keygen(1) ALLOWED SIGNERS:
// principals, options (only namespaces="..." is supported), the key.
func parseAllowedSigners(file string, b []byte) ([]allowedSigner, error) {
	var out []allowedSigner
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		where := fmt.Sprintf("%s:%d", file, n)
		a, err := parseSignerLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		a.where = where
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no allowed signers", file)
	}
	return out, nil
}

func parseSignerLine(line string) (allowedSigner, error) {
	var a allowedSigner
	principals, rest := nextField(line)
	a.principals = strings.Trim(principals, `"`)
	if a.principals == "" || rest == "" {
		return a, errors.New("want PRINCIPALS [OPTIONS] KEYTYPE KEY")
	}
	if first, _ := nextField(rest); !isKeyType(first) {
		opts, keyPart := nextField(rest)
		for _, opt := range splitOptions(opts) {
			name, val, _ := strings.Cut(opt, "=")
			switch strings.ToLower(name) {
			case "namespaces":
				a.namespaces = strings.Split(strings.Trim(val, `"`), ",")
			default:
				return a, fmt.Errorf("option %q is not supported (only namespaces=)", name)
			}
		}
		rest = keyPart
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(rest))
	if err != nil {
		return a, fmt.Errorf("key: %w", err)
	}
	a.key = key
	return a, nil
}

// isKeyType reports whether word names an SSH key type, such as
// ssh-ed25519, ecdsa-sha2-nistp256 or sk-ssh-ed25519@openssh.com.
func isKeyType(word string) bool {
	return strings.HasPrefix(word, "ssh-") || strings.HasPrefix(word, "ecdsa-") || strings.HasPrefix(word, "sk-")
}

// nextField splits off the first whitespace-separated field, where double
// quotes keep spaces inside.
func nextField(s string) (string, string) {
	quoted := false
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case (r == ' ' || r == '\t') && !quoted:
			return s[:i], strings.TrimSpace(s[i:])
		}
	}
	return s, ""
}

// splitOptions splits comma-separated options outside double quotes.
func splitOptions(s string) []string {
	var out []string
	quoted, start := false, 0
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
