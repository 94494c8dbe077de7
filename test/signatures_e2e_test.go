package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestSignaturesSSHAndGPG, through the real server binary and a git daemon,
// with --verify-signatures and keys the test makes with ssh-keygen and
// gpg: the unsigned first commit is refused and nothing runs; a commit
// signed with an SSH key of allowed_signers applies; one signed with
// another SSH key, or with a key allowed only in another namespace, is
// refused and the last good commit stays applied; the same for GPG with an
// armored keyring. A preview of an unsigned branch still plans and says
// it is unsigned.
func TestSignaturesSSHAndGPG(t *testing.T) {
	dir := t.TempDir()
	alice, alicePub := e2eSSHKey(t, dir, "alice")
	mallory, _ := e2eSSHKey(t, dir, "mallory")
	filer, filerPub := e2eSSHKey(t, dir, "filer")
	signers := filepath.Join(dir, "allowed_signers")
	writeFile(t, signers, "alice@example.com namespaces=\"git\" "+alicePub+"\nfiler@example.com namespaces=\"file\" "+filerPub+"\n")
	carol, carolPub := e2eGPGKey(t, "carol@example.com")
	eve, _ := e2eGPGKey(t, "eve@example.com")
	keyring := filepath.Join(dir, "keyring.asc")
	writeFile(t, keyring, carolPub)

	e := newE2E(t, e2eOptions{noWait: true, args: []string{"--verify-signatures", "--allowed-signers", signers,
		"--gpg-keyring", keyring, "--preview-refs", "refs/heads/preview/*"}})
	s := e.srv
	c := s.waitCommit(e.first)
	wantRefused(t, c, "", "the commit is not signed")
	if n := len(s.machines("")); n != 0 {
		t.Fatalf("%d machines after an unsigned first commit, want none", n)
	}

	signWith := func(format, key, program string) {
		e.work.Run("config", "commit.gpgsign", "true")
		e.work.Run("config", "gpg.format", format)
		e.work.Run("config", "user.signingkey", key)
		e.work.Run("config", "gpg.program", program)
	}
	signWith("ssh", alice, "gpg")
	e.work.Write("README.md", "# Clusters\n\nSigned.\n")
	good := e.push("Signed by alice")
	c = s.waitApplied(good)
	if sig := c.Status.Signature; sig == nil || !sig.Verified || sig.Type != "ssh" || sig.Signer != "alice@example.com" || !strings.HasPrefix(sig.Key, "SHA256:") {
		t.Errorf("alice's commit: signature %+v, want verified ssh of alice@example.com", c.Status.Signature)
	}
	workers := e2eCounts(s.machines(""))["staging/workers"]

	e.setCount("staging", "workers", workers+1)
	signWith("ssh", mallory, "gpg")
	wantRefused(t, s.waitCommit(e.push("Signed by mallory")), "ssh", "the SSH key is not in the allowed signers file")
	signWith("ssh", filer, "gpg")
	wantRefused(t, s.waitCommit(e.push("Signed by a key for files")), "ssh", `not allowed to sign in namespace "git"`)
	signWith("openpgp", "eve@example.com", eve)
	wantRefused(t, s.waitCommit(e.push("Signed by eve")), "gpg", "not signed by a key of the GPG keyring")
	if st := s.status(); st.Reconciler.LastAppliedCommit != good || e2eCounts(s.machines(""))["staging/workers"] != workers {
		t.Fatalf("after refused commits: last applied %s, staging workers %d; want %s and %d", st.Reconciler.LastAppliedCommit,
			e2eCounts(s.machines(""))["staging/workers"], good, workers)
	}

	signWith("openpgp", "carol@example.com", carol)
	sha := e.push("Signed by carol")
	c = s.waitApplied(sha)
	if sig := c.Status.Signature; sig == nil || !sig.Verified || sig.Type != "gpg" || sig.Signer != "Carol <carol@example.com>" {
		t.Errorf("carol's commit: signature %+v, want verified gpg of Carol", c.Status.Signature)
	}
	s.waitFor("staging's new worker", func() bool { return e2eCounts(s.machines(""))["staging/workers"] == workers+1 })

	e.work.Run("config", "commit.gpgsign", "false")
	e.setCount("production", "workers", 3)
	branch := e.pushBranch("preview/more", "Unsigned preview")
	p := s.previewCommit(branch)
	if p.Status.Phase != schema.CommitSucceeded || e2eResult(t, p, "production").Plan.Add != 1 {
		t.Errorf("unsigned preview: %s %v, want Succeeded with production +1", p.Status.Phase, p.Status.Tenants)
	}
	if sig := p.Status.Signature; sig == nil || sig.Verified || sig.Refused || sig.Type != "" ||
		!strings.HasPrefix(p.Status.Message, "unsigned: the commit is not signed") {
		t.Errorf("unsigned preview: signature %+v message %q, want unsigned and not refused", p.Status.Signature, p.Status.Message)
	}
}

// wantRefused checks that c was refused for its signature: failed and
// stalled, nothing of it run, and the Commit says which signature and why.
func wantRefused(t *testing.T, c schema.Commit, typ, reason string) {
	t.Helper()
	sig := c.Status.Signature
	if c.Status.Phase != schema.CommitFailed || sig == nil || !sig.Refused || sig.Verified || sig.Type != typ ||
		!strings.Contains(sig.Reason, reason) || !strings.Contains(c.Status.Message, reason) || len(c.Status.Tenants) != 0 {
		t.Fatalf("commit %s: phase %s, signature %+v, message %q; want refused (%s): %s", c.Spec.SHA[:12], c.Status.Phase, sig, c.Status.Message, typ, reason)
	}
	if typ != "" && (sig.Key == "" || !strings.Contains(c.Status.Message, sig.Key)) {
		t.Errorf("commit %s: message %q does not name the key %q", c.Spec.SHA[:12], c.Status.Message, sig.Key)
	}
	st := c.Status.Conditions.Get(schema.ConditionStalled)
	if st == nil || st.Status != schema.ConditionTrue || st.Reason != schema.ReasonUnverifiedSignature {
		t.Errorf("commit %s: Stalled %+v, want True UnverifiedSignature", c.Spec.SHA[:12], st)
	}
}

// e2eSSHKey makes an ed25519 key pair and returns the private key's path
// and the public key line.
func e2eSSHKey(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, err := os.ReadFile(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return p, strings.TrimSpace(string(b))
}

// e2eGPGKey makes a GPG key without passphrase in a GNUPGHOME of its own,
// and returns a gpg program for git that uses that home, and the armored
// public key.
func e2eGPGKey(t *testing.T, email string) (string, string) {
	t.Helper()
	home, err := os.MkdirTemp("", "gpg") // short: gpg-agent's socket path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("gpgconf", "--homedir", home, "--kill", "gpg-agent").Run()
		os.RemoveAll(home)
	})
	name := strings.ToUpper(email[:1]) + email[1:strings.IndexByte(email, '@')]
	if out, err := exec.Command("gpg", "--batch", "--homedir", home, "--passphrase", "", "--quick-gen-key",
		name+" <"+email+">", "ed25519", "sign", "never").CombinedOutput(); err != nil {
		t.Fatalf("gpg --quick-gen-key: %v\n%s", err, out)
	}
	pub, err := exec.Command("gpg", "--batch", "--homedir", home, "--armor", "--export", email).Output()
	if err != nil {
		t.Fatalf("gpg --export: %v", err)
	}
	program := filepath.Join(home, "gpg-for-git")
	writeFile(t, program, "#!/bin/sh\nexec gpg --homedir "+home+" \"$@\"\n")
	if err := os.Chmod(program, 0o755); err != nil {
		t.Fatal(err)
	}
	return program, string(pub)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
