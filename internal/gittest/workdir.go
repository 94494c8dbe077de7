package gittest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Workdir is a non-bare clone of a remote in a temporary directory, on
// branch main, for writing commits and pushing them with the git CLI.
type Workdir struct {
	t   testing.TB
	dir string
}

// NewWorkdir clones the repository at remoteURL into a temporary directory
// and names it origin. When that repository is empty the work tree starts
// on an unborn main; with remoteURL "" it is a repository of its own,
// without a remote.
func NewWorkdir(t testing.TB, remoteURL string) *Workdir {
	t.Helper()
	w := &Workdir{t: t, dir: t.TempDir()}
	w.Run("init", "--quiet", "--initial-branch=main")
	if remoteURL == "" {
		return w
	}
	w.Run("remote", "add", "origin", remoteURL)
	w.Run("fetch", "--quiet", "origin")
	if _, err := runGit(w.dir, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/main"); err == nil {
		w.Run("checkout", "--quiet", "-B", "main", "refs/remotes/origin/main")
	}
	return w
}

// Dir returns the work tree's path.
func (w *Workdir) Dir() string { return w.dir }

// Run runs git in the work tree and returns its trimmed stdout.
func (w *Workdir) Run(args ...string) string {
	w.t.Helper()
	return Git(w.t, w.dir, args...)
}

// Write writes content to the slash-separated path in the work tree,
// creating parent directories, and stages it.
func (w *Workdir) Write(path, content string) {
	w.t.Helper()
	full := w.path(path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		w.t.Fatalf("write %s: %v", path, err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		w.t.Fatalf("write %s: %v", path, err)
	}
	w.Run("add", "--", path)
}

// Symlink creates a symbolic link at path pointing at target and stages it.
func (w *Workdir) Symlink(target, path string) {
	w.t.Helper()
	full := w.path(path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		w.t.Fatalf("symlink %s: %v", path, err)
	}
	if err := os.Symlink(target, full); err != nil {
		w.t.Fatalf("symlink %s: %v", path, err)
	}
	w.Run("add", "--", path)
}

// Gitlink stages a submodule entry at path that records commit sha, as
// `git submodule add` would, without cloning anything: the work tree holds
// an empty directory there, like an uninitialized submodule.
func (w *Workdir) Gitlink(path, sha string) {
	w.t.Helper()
	if err := os.MkdirAll(w.path(path), 0o755); err != nil {
		w.t.Fatalf("gitlink %s: %v", path, err)
	}
	w.Run("update-index", "--add", "--cacheinfo", "160000,"+sha+","+path)
}

// Remove deletes path (a file or a directory) from the work tree and stages
// the removal.
func (w *Workdir) Remove(path string) {
	w.t.Helper()
	w.Run("rm", "-r", "--quiet", "--", path)
}

// Commit commits everything staged and changed, even nothing, and returns
// the new commit's sha.
func (w *Workdir) Commit(msg string) string {
	w.t.Helper()
	w.Run("add", "--all")
	w.Run("commit", "--quiet", "--allow-empty", "--no-verify", "-m", msg)
	return w.Rev("HEAD")
}

// Rev resolves a revision to a full sha.
func (w *Workdir) Rev(rev string) string {
	w.t.Helper()
	return w.Run("rev-parse", "--verify", rev+"^{commit}")
}

// Push pushes HEAD to the remote branch of the same name as the current one.
func (w *Workdir) Push() {
	w.t.Helper()
	branch := w.Run("symbolic-ref", "--short", "HEAD")
	w.Run("push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
}

// ForcePush pushes HEAD to ref on the remote even when that is not a fast
// forward. A ref without a "refs/" prefix names a branch.
func (w *Workdir) ForcePush(ref string) {
	w.t.Helper()
	w.Run("push", "--quiet", "--force", "origin", "HEAD:"+fullRef(ref))
}

// Reset moves the current branch and the work tree to rev.
func (w *Workdir) Reset(rev string) {
	w.t.Helper()
	w.Run("reset", "--quiet", "--hard", rev)
}

// Tag creates (or moves) the tag name at HEAD and pushes it. A non-empty
// message makes it an annotated tag.
func (w *Workdir) Tag(name, message string) {
	w.t.Helper()
	if message == "" {
		w.Run("tag", "--force", name)
	} else {
		w.Run("tag", "--force", "--annotate", "-m", message, name)
	}
	w.Run("push", "--quiet", "--force", "origin", "refs/tags/"+name)
}

func (w *Workdir) path(p string) string {
	return filepath.Join(w.dir, filepath.FromSlash(p))
}

func fullRef(ref string) string {
	if strings.HasPrefix(ref, "refs/") {
		return ref
	}
	return "refs/heads/" + ref
}
