package gittest

import (
	"net"
	"os"
	"strings"
	"testing"
)

func TestDaemonCloneAndPush(t *testing.T) {
	d := NewDaemon(t)
	d.CreateBare("repo.git")
	w := NewWorkdir(t, d.URL("repo.git"))
	w.Write("a/b.yaml", "kind: Tenant\n")
	sha := w.Commit("first")
	w.Push()

	if got := Git(t, d.Path("repo.git"), "rev-parse", "refs/heads/main"); got != sha {
		t.Fatalf("remote main = %s, want %s", got, sha)
	}
	clone := NewWorkdir(t, d.URL("repo.git"))
	if got := clone.Rev("HEAD"); got != sha {
		t.Fatalf("clone HEAD = %s, want %s", got, sha)
	}
	if got := clone.Run("show", "HEAD:a/b.yaml"); got != "kind: Tenant" {
		t.Fatalf("clone a/b.yaml = %q", got)
	}
	if d.Connections() < 3 {
		t.Fatalf("Connections() = %d, want at least 3 (push, fetch, fetch)", d.Connections())
	}
}

func TestDaemonStopStart(t *testing.T) {
	d := NewDaemon(t)
	d.CreateBare("repo.git")
	d.Stop()
	if c, err := net.Dial("tcp", d.Addr()); err == nil {
		c.Close()
		t.Fatal("dial after Stop succeeded")
	}
	if _, err := runGit(t.TempDir(), "ls-remote", d.URL("repo.git")); err == nil {
		t.Fatal("ls-remote after Stop succeeded")
	}
	d.Start()
	if _, err := runGit(t.TempDir(), "ls-remote", d.URL("repo.git")); err != nil {
		t.Fatalf("ls-remote after Start: %v", err)
	}
}

func TestHTTPAuth(t *testing.T) {
	h := NewHTTP(t, "alice", "s3cret")
	h.CreateBare("repo.git")
	w := NewWorkdir(t, h.AuthURL("repo.git"))
	w.Write("x.yaml", "x: 1\n")
	sha := w.Commit("first")
	w.Push()
	if got := Git(t, h.Path("repo.git"), "rev-parse", "refs/heads/main"); got != sha {
		t.Fatalf("remote main = %s, want %s", got, sha)
	}

	_, err := runGit(t.TempDir(), "ls-remote", h.URL("repo.git"))
	if err == nil {
		t.Fatal("ls-remote without credentials succeeded")
	}
	if h.Denied() == 0 {
		t.Fatal("Denied() = 0 after an anonymous request")
	}
	bad := strings.Replace(h.AuthURL("repo.git"), "s3cret", "wrong", 1)
	if _, err := runGit(t.TempDir(), "ls-remote", bad); err == nil {
		t.Fatal("ls-remote with a wrong password succeeded")
	}

	h.Stop()
	if _, err := runGit(t.TempDir(), "ls-remote", h.AuthURL("repo.git")); err == nil {
		t.Fatal("ls-remote after Stop succeeded")
	}
	h.Start()
	out, err := runGit(t.TempDir(), "ls-remote", h.AuthURL("repo.git"))
	if err != nil || !strings.Contains(out, sha) {
		t.Fatalf("ls-remote after Start = %q, %v", out, err)
	}
}

func TestHTTPLargePush(t *testing.T) {
	h := NewHTTP(t, "u", "p")
	h.CreateBare("big.git")
	w := NewWorkdir(t, h.AuthURL("big.git"))
	// Incompressible content, so the pack is larger than 1 MB.
	var b strings.Builder
	x := uint32(1)
	for b.Len() < 3<<20 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte(byte('a' + x%26))
	}
	w.Write("big.txt", b.String())
	sha := w.Commit("big")
	w.Push()
	if got := Git(t, h.Path("big.git"), "rev-parse", "refs/heads/main"); got != sha {
		t.Fatalf("remote main = %s, want %s", got, sha)
	}
}

func TestWorkdirTagsAndForcePush(t *testing.T) {
	d := NewDaemon(t)
	d.CreateBare("r.git")
	w := NewWorkdir(t, d.URL("r.git"))
	first := w.Commit("one")
	w.Push()
	w.Tag("v1", "release one")
	second := w.Commit("two")
	w.Push()
	w.Reset(first)
	w.ForcePush("main")
	remote := d.Path("r.git")
	if got := Git(t, remote, "rev-parse", "refs/heads/main"); got != first {
		t.Fatalf("main after force push = %s, want %s", got, first)
	}
	if got := Git(t, remote, "rev-parse", "v1^{commit}"); got != first {
		t.Fatalf("v1 = %s, want %s", got, first)
	}
	if got := Git(t, remote, "cat-file", "-t", "v1"); got != "tag" {
		t.Fatalf("v1 is a %s, want an annotated tag", got)
	}
	if second == first {
		t.Fatal("empty commits got the same sha")
	}
}

func TestSSHCloneAndPush(t *testing.T) {
	s := NewSSH(t)
	s.CreateBare("repo.git")
	home := t.TempDir()
	key := home + "/id"
	if err := os.WriteFile(key, s.ClientKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	sshCmd := "ssh -i " + key + " -o IdentitiesOnly=yes -o UserKnownHostsFile=" + s.KnownHostsFile() + " -o StrictHostKeyChecking=yes -o BatchMode=yes"
	w := NewWorkdir(t, "")
	w.Run("config", "core.sshCommand", sshCmd)
	w.Run("remote", "add", "origin", s.URL("repo.git"))
	w.Write("x.yaml", "x: 1\n")
	sha := w.Commit("over ssh")
	w.Push()
	if got := Git(t, s.Path("repo.git"), "rev-parse", "refs/heads/main"); got != sha {
		t.Fatalf("remote main = %s, want %s", got, sha)
	}
	out := w.Run("ls-remote", "origin")
	if !strings.Contains(out, sha) {
		t.Fatalf("ls-remote = %q", out)
	}
	if _, err := runGit(w.Dir(), "-c", "core.sshCommand=ssh -o UserKnownHostsFile="+s.KnownHostsFile()+" -o BatchMode=yes -o IdentitiesOnly=yes -i /dev/null", "ls-remote", "origin"); err == nil {
		t.Fatal("ls-remote without the client key succeeded")
	}
	for _, line := range []string{"sh -c true", "git-upload-pack /repo.git", "git-upload-pack 'a'b'"} {
		if _, err := s.command(line); err == nil {
			t.Fatalf("command %q accepted", line)
		}
	}
	cmd, err := s.command("git-upload-pack '/../../etc'")
	if err != nil || cmd.Args[len(cmd.Args)-1] != s.Path("etc") {
		t.Fatalf("a path outside the root: %v, %v", cmd, err)
	}
}

func TestCreateSHA256(t *testing.T) {
	d := NewDaemon(t)
	sha := d.CreateSHA256("sha.git", map[string]string{"a/b.yaml": "kind: Tenant\n"})
	if len(sha) != 64 {
		t.Fatalf("sha %q: want 64 hex digits", sha)
	}
	if got := Git(t, t.TempDir(), "ls-remote", d.URL("sha.git"), "refs/heads/main"); !strings.HasPrefix(got, sha) {
		t.Fatalf("ls-remote: %q, want main at %s", got, sha)
	}
	if got := Git(t, d.Path("sha.git"), "show", "main:a/b.yaml"); got != "kind: Tenant" {
		t.Fatalf("a/b.yaml = %q", got)
	}
}
