package sources

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// sshKey makes an ed25519 key pair with ssh-keygen and returns the private
// key's path and the public key line.
func sshKey(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return p, strings.TrimSpace(string(pub))
}

// gpgKey makes a GPG key without passphrase in a temporary GNUPGHOME and
// returns that home, the key's email and its armored public key.
func gpgKey(t *testing.T, email string) (string, string) {
	t.Helper()
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	gpg := func(args ...string) []byte {
		cmd := exec.Command("gpg", append([]string{"--batch", "--homedir", home}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v", args, err)
		}
		return out
	}
	gpg("--passphrase", "", "--quick-gen-key", "Signer <"+email+">", "ed25519", "sign", "never")
	return home, string(gpg("--armor", "--export", email))
}

// signedCommit commits a file in repo with git and the extra -c settings
// (none: unsigned), and returns the commit's sha.
func signedCommit(t *testing.T, repo string, env []string, config ...string) string {
	t.Helper()
	run := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(repo, ".git")); err != nil {
		run("init", "-q", "-b", "main")
	}
	f := filepath.Join(repo, "f")
	b, _ := os.ReadFile(f)
	if err := os.WriteFile(f, append(b, 'x'), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "f")
	args := []string{"-c", "user.name=T", "-c", "user.email=t@example.com"}
	for _, c := range config {
		args = append(args, "-c", c)
	}
	sign := "--no-gpg-sign"
	if len(config) > 0 {
		sign = "-S"
	}
	run(append(args, "commit", "-q", sign, "-m", "change")...)
	return run("rev-parse", "HEAD")
}

func verifyIn(t *testing.T, repo, sha string, v *Verifier) Signature {
	t.Helper()
	r, err := git.PlainOpen(repo)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(c)
}

func TestVerifySSH(t *testing.T) {
	dir := t.TempDir()
	trusted, trustedPub := sshKey(t, dir, "trusted")
	other, _ := sshKey(t, dir, "other")
	gitOnly, gitOnlyPub := sshKey(t, dir, "fileonly")
	signers := filepath.Join(dir, "allowed_signers")
	if err := os.WriteFile(signers, []byte("# who may sign\nalice@example.com namespaces=\"git\" "+trustedPub+"\n"+
		"bob@example.com namespaces=\"file\" "+gitOnlyPub+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(signers, "")
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, "repo")
	os.Mkdir(repo, 0o755)
	sshSign := func(key string) []string { return []string{"gpg.format=ssh", "user.signingkey=" + key} }

	s := verifyIn(t, repo, signedCommit(t, repo, nil, sshSign(trusted)...), v)
	if !s.Verified || s.Type != SignatureSSH || s.Signer != "alice@example.com" || !strings.HasPrefix(s.Key, "SHA256:") || s.Reason != "" {
		t.Errorf("signed by alice's key: %+v", s)
	}
	for _, c := range []struct {
		name, sha, reason string
	}{
		{"unsigned", signedCommit(t, repo, nil), "not signed"},
		{"another key", signedCommit(t, repo, nil, sshSign(other)...), "not in the allowed signers"},
		{"a key for another namespace", signedCommit(t, repo, nil, sshSign(gitOnly)...), `not allowed to sign in namespace "git"`},
	} {
		s := verifyIn(t, repo, c.sha, v)
		if s.Verified || !strings.Contains(s.Reason, c.reason) {
			t.Errorf("%s: %+v, want refused: %s", c.name, s, c.reason)
		}
	}
}

func TestVerifyGPG(t *testing.T) {
	dir := t.TempDir()
	home, pub := gpgKey(t, "carol@example.com")
	otherHome, _ := gpgKey(t, "mallory@example.com")
	ring := filepath.Join(dir, "keyring.asc")
	if err := os.WriteFile(ring, []byte(pub), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier("", ring)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, "repo")
	os.Mkdir(repo, 0o755)
	s := verifyIn(t, repo, signedCommit(t, repo, []string{"GNUPGHOME=" + home}, "user.signingkey=carol@example.com"), v)
	if !s.Verified || s.Type != SignatureGPG || s.Signer != "Signer <carol@example.com>" || s.Key == "" {
		t.Errorf("signed by carol's key: %+v", s)
	}
	s = verifyIn(t, repo, signedCommit(t, repo, []string{"GNUPGHOME=" + otherHome}, "user.signingkey=mallory@example.com"), v)
	if s.Verified || s.Type != SignatureGPG || s.Key == "" || !strings.Contains(s.Reason, "not signed by a key of the GPG keyring") {
		t.Errorf("signed by mallory's key: %+v", s)
	}
	if s := verifyIn(t, repo, signedCommit(t, repo, nil), v); s.Verified || !strings.Contains(s.Reason, "not signed") {
		t.Errorf("unsigned: %+v", s)
	}
}

func TestAllowedSignersErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"alice@example.com\n", "f:1: want PRINCIPALS"},
		{"# only a comment\n", "no allowed signers"},
		{"alice@example.com cert-authority ssh-ed25519 AAAA\n", `f:1: option "cert-authority" is not supported`},
		{"\nalice@example.com ssh-ed25519 notbase64\n", "f:2: key:"},
	} {
		_, err := parseAllowedSigners("f", []byte(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %s", c.text, err, c.want)
		}
	}
}
