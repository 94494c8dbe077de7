package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitWithoutIdentity runs git in dir where git knows no identity of its
// own: an empty HOME, no system config, and user.useConfigOnly, so that it
// cannot guess one from the host's name either.
func gitWithoutIdentity(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GIT_") || k == "HOME" || k == "XDG_CONFIG_HOME" || k == "EMAIL" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=user.useConfigOnly", "GIT_CONFIG_VALUE_0=true")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDemoRepositoryHasIdentity: the `git commit -am` that the demo's
// hints print works where git knows no identity, because the demo
// repository's own config has one; and a repository that an earlier demo
// made without one gets it when the demo runs again.
func TestDemoRepositoryHasIdentity(t *testing.T) {
	cloud := demoClouds()["sim"]
	repo := filepath.Join(t.TempDir(), "repo")
	if _, created, err := demoRepository(repo, cloud); err != nil || !created {
		t.Fatalf("demoRepository: created %v, %v", created, err)
	}
	commitChange := func(change string) {
		t.Helper()
		f := filepath.Join(repo, "examples", filepath.FromSlash(cloud.scale))
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, "# "+change+"\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := gitWithoutIdentity(t, repo, "commit", "-am", change); err != nil {
			t.Fatalf("git commit -am in the demo repository: %v\n%s", err, out)
		}
		out, err := gitWithoutIdentity(t, repo, "log", "-1", "--format=%an <%ae>")
		if err != nil || strings.TrimSpace(out) != demoUserName+" <"+demoUserEmail+">" {
			t.Fatalf("the commit's author: %q, %v", out, err)
		}
	}
	commitChange("A first change")

	// A repository without an identity, as earlier demos made them.
	for _, key := range []string{"user.name", "user.email"} {
		if out, err := gitWithoutIdentity(t, repo, "config", "--local", "--unset", key); err != nil {
			t.Fatalf("unset %s: %v\n%s", key, err, out)
		}
	}
	if _, created, err := demoRepository(repo, cloud); err != nil || created {
		t.Fatalf("demoRepository again: created %v, %v", created, err)
	}
	commitChange("A second change")
}
