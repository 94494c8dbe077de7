package sources

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

// TestDescendsThroughMerges: a merge descends from both its parents'
// histories; a commit made on the merged branch afterwards is not an
// ancestor.
func TestDescendsThroughMerges(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	w.Run("checkout", "--quiet", "-b", "side")
	side := w.Commit("on the side")
	w.Run("checkout", "--quiet", "main")
	onMain := w.Commit("on main")
	w.Run("merge", "--quiet", "--no-ff", "--no-edit", "side")
	merge := w.Rev("HEAD")
	w.Push()
	w.Run("checkout", "--quiet", "side")
	later := w.Commit("later on the side")
	w.Run("push", "--quiet", "origin", "side")

	snap, _ := mustFetch(t, newTestGit(t, GitOptions{URL: d.URL("repo.git")}))
	if snap.Revision != merge {
		t.Fatalf("Revision = %s, want the merge %s", snap.Revision, merge)
	}
	for _, rev := range []string{first, side, onMain, merge} {
		wantDescends(t, snap, rev, true)
	}
	wantDescends(t, snap, later, false)
}

// TestDescendsShallowClone: in a clone that git made shallow (a source
// never fetches so), an ancestor within the depth is found, and beyond it
// the answer is an error that says the clone is shallow and what to do,
// never a guess.
func TestDescendsShallowClone(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, first := seedRepo(t, d)
	second := w.Commit("second")
	w.Commit("third")
	w.Push()
	g := newTestGit(t, GitOptions{URL: d.URL("repo.git")})
	if err := os.MkdirAll(filepath.Dir(g.CloneDir()), 0o700); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, filepath.Dir(g.CloneDir()), "clone", "--quiet", "--bare", "--depth=2", d.URL("repo.git"), g.CloneDir())

	snap, _ := mustFetch(t, g)
	if g.Status().Fetches != 0 {
		t.Fatalf("Fetches = %d: the shallow clone holds the head, want none", g.Status().Fetches)
	}
	wantDescends(t, snap, second, true)
	ok, err := snap.Descends(first)
	if ok || !errors.Is(err, ErrShallow) || !strings.Contains(err.Error(), g.CloneDir()) || !strings.Contains(err.Error(), "remove the clone") {
		t.Fatalf("beyond the shallow clone's depth: %v, %v; want ErrShallow naming %s", ok, err, g.CloneDir())
	}
}

// TestDescendsDirectory: a directory's snapshot has no history to tell.
func TestDescendsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := newTestDir(t, DirOptions{Path: dir}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := snap.Descends(snap.Revision); ok || !errors.Is(err, ErrNoHistory) {
		t.Fatalf("directory: %v, %v; want ErrNoHistory", ok, err)
	}
}
