package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	c := s.WaitCommit(e.first)
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
	wantRefused(t, s.WaitCommit(e.push("Signed by mallory")), "ssh", "the SSH key is not in the allowed signers file")
	signWith("ssh", filer, "gpg")
	wantRefused(t, s.WaitCommit(e.push("Signed by a key for files")), "ssh", `not allowed to sign in namespace "git"`)
	signWith("openpgp", "eve@example.com", eve)
	wantRefused(t, s.WaitCommit(e.push("Signed by eve")), "gpg", "not signed by a key of the GPG keyring")
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
	s.WaitFor("staging's new worker", func() bool { return e2eCounts(s.machines(""))["staging/workers"] == workers+1 })

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

// TestSignaturesRefuseNonFastForward, through the real server with
// --verify-signatures and an SSH key: main force-pushed back to the first
// signed commit, which would destroy a machine the next one added, is
// refused with NonFastForward and nothing is destroyed, also after a
// restart; a signed commit on top of the refused one is applied; main
// force-pushed back again is refused until the server runs with
// --allow-non-fast-forward.
func TestSignaturesRefuseNonFastForward(t *testing.T) {
	dir := t.TempDir()
	alice, alicePub := e2eSSHKey(t, dir, "alice")
	signers := filepath.Join(dir, "allowed_signers")
	writeFile(t, signers, "alice@example.com "+alicePub+"\n")
	e := newE2E(t, e2eOptions{noWait: true, args: []string{"--verify-signatures", "--allowed-signers", signers}})
	s := e.srv
	wantRefused(t, s.WaitCommit(e.first), "", "the commit is not signed")
	e.work.Run("config", "commit.gpgsign", "true")
	e.work.Run("config", "gpg.format", "ssh")
	e.work.Run("config", "user.signingkey", alice)

	e.work.Write("README.md", "# Clusters\n\nSigned.\n")
	first := e.push("First signed commit")
	s.waitApplied(first)
	workers := e2eCounts(s.machines(""))["staging/workers"]
	e.setCount("staging", "workers", workers+1)
	grown := e.push("Grow staging by a worker")
	s.waitApplied(grown)
	s.WaitFor("staging's new worker", func() bool { return e2eCounts(s.machines(""))["staging/workers"] == workers+1 })
	machines, groups := e2eMachineIDs(s.machines("")), s.status().Counts.NodeGroups
	unchanged := func(when string) {
		t.Helper()
		if n := s.status().Counts.NodeGroups; n != groups {
			t.Errorf("%s: %d node groups, want %d", when, n, groups)
		}
		after := e2eMachineIDs(s.machines(""))
		e2eSameIDs(t, when, machines, after)
		if len(after) != len(machines) {
			t.Errorf("%s: %d machines, want %d", when, len(after), len(machines))
		}
	}

	since := time.Now()
	e.work.Reset(first)
	e.work.ForcePush("main")
	wantRefusedNonFastForward(t, s, first, grown, since)
	unchanged("after the force push back to the first signed commit")
	s.Stop()
	since = time.Now()
	s.Start()
	wantRefusedNonFastForward(t, s, first, grown, since)
	unchanged("after a restart")

	e.setCount("staging", "workers", workers+1)
	onTop := e.push("Signed on top of the force push")
	c := s.waitApplied(onTop)
	if a := c.Status.Ancestry; !c.Status.NonFastForward || a == nil || a.Refused || a.LastApplied != grown || !strings.Contains(a.Message, "on top of "+first[:12]) {
		t.Errorf("commit on top of the refused one: nonFastForward %v, ancestry %+v; want applied over %s", c.Status.NonFastForward, a, grown[:12])
	}
	unchanged("after the commit on top of the refused one")

	since = time.Now()
	e.work.Reset(grown)
	e.work.ForcePush("main")
	wantRefusedNonFastForward(t, s, grown, onTop, since)
	s.Stop()
	s.Args = append(s.Args, "--allow-non-fast-forward")
	since = time.Now()
	s.Start()
	c = waitFinished(s, grown, since)
	if a := c.Status.Ancestry; c.Status.Phase != schema.CommitSucceeded || !c.Status.NonFastForward || a == nil || a.Refused || a.LastApplied != onTop {
		t.Errorf("with --allow-non-fast-forward: %s, nonFastForward %v, ancestry %+v; want applied over %s", c.Status.Phase, c.Status.NonFastForward, a, onTop[:12])
	}
	unchanged("with --allow-non-fast-forward")
}

// wantRefusedNonFastForward waits until the Commit of sha, received after
// since, is refused for not descending from lastApplied: failed and
// stalled with reason NonFastForward, nothing of it run.
func wantRefusedNonFastForward(t *testing.T, s *e2eServer, sha, lastApplied string, since time.Time) {
	t.Helper()
	c := waitFinished(s, sha, since)
	a := c.Status.Ancestry
	if c.Status.Phase != schema.CommitFailed || !c.Status.NonFastForward || a == nil || !a.Refused || a.LastApplied != lastApplied || len(c.Status.Tenants) != 0 ||
		!strings.Contains(c.Status.Message, "does not descend from "+lastApplied[:12]) {
		t.Fatalf("commit %s: %s, nonFastForward %v, ancestry %+v, %d tenants, message %q; want refused for not descending from %s",
			sha[:12], c.Status.Phase, c.Status.NonFastForward, a, len(c.Status.Tenants), c.Status.Message, lastApplied[:12])
	}
	if st := c.Status.Conditions.Get(schema.ConditionStalled); st == nil || st.Status != schema.ConditionTrue || st.Reason != schema.ReasonNonFastForward {
		t.Errorf("commit %s: Stalled %+v, want True NonFastForward", sha[:12], st)
	}
}

// waitFinished waits until the Commit of sha received after since has a
// final phase, and returns it.
func waitFinished(s *e2eServer, sha string, since time.Time) schema.Commit {
	s.t.Helper()
	var c schema.Commit
	s.WaitFor("commit "+sha[:12]+" to finish", func() bool {
		var ok bool
		c, ok = s.Commit(sha)
		return ok && c.Status.Phase.Done() && c.Status.Timings.ReceivedAt.After(since)
	})
	return c
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
