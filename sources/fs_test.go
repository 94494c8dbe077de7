package sources

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

// oddRepo builds a local repository whose tree holds a nested directory, an
// executable, an empty file, a symbolic link to a file, one to a directory,
// one leading outside the tree, and a submodule.
func oddRepo(t *testing.T) (*gittest.Workdir, string, string) {
	t.Helper()
	w := gittest.NewWorkdir(t, "")
	w.Write("a/b/c.yaml", "kind: Tenant\n")
	w.Write("a/d.yaml", "kind: NodeGroup\n")
	w.Write("empty.yaml", "")
	w.Write("run.sh", "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(w.Dir(), "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	w.Symlink("a/d.yaml", "link.yaml")
	w.Symlink("a", "dirlink")
	w.Symlink("../../etc/passwd", "a/escape.yaml")
	sub := strings.Repeat("1234567890", 4)
	w.Gitlink("vendor/mod", sub)
	sha := w.Commit("odd entries")
	return w, sha, sub
}

func TestTreeFSConformance(t *testing.T) {
	w, sha, _ := oddRepo(t)
	fsys, got, err := OpenRevision(w.Dir(), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if got != sha {
		t.Fatalf("resolved %s, want %s", got, sha)
	}
	if err := fstest.TestFS(fsys, "a/b/c.yaml", "a/d.yaml", "empty.yaml", "run.sh", "link.yaml", "dirlink", "a/escape.yaml", "vendor/mod"); err != nil {
		t.Fatal(err)
	}
}

func TestTreeFSNonRegular(t *testing.T) {
	w, _, _ := oddRepo(t)
	fsys, _, err := OpenRevision(w.Dir(), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	checkNonRegular(t, fsys)

	info, err := fs.Stat(fsys, "run.sh")
	if err != nil || info.Mode() != 0o555 {
		t.Fatalf("run.sh: %v, %v; want an executable -r-xr-xr-x", info.Mode(), err)
	}
	info, err = fs.Stat(fsys, "a/b/c.yaml")
	if err != nil || info.Mode() != 0o444 || info.Size() != int64(len("kind: Tenant\n")) || info.ModTime().IsZero() {
		t.Fatalf("a/b/c.yaml: %+v, %v", info, err)
	}
}

func checkNonRegular(t *testing.T, fsys fs.FS) {
	t.Helper()
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]fs.FileMode{}
	for _, e := range entries {
		types[e.Name()] = e.Type()
	}
	if types["link.yaml"] != fs.ModeSymlink || types["dirlink"] != fs.ModeSymlink || types["a"] != fs.ModeDir {
		t.Fatalf("entry types = %v", types)
	}
	if types["empty.yaml"] != 0 {
		t.Fatalf("empty.yaml type = %v, want regular", types["empty.yaml"])
	}

	// A symlink is reported as one, and opening it reads the link, not
	// the file it points to.
	for _, name := range []string{"link.yaml", "a/escape.yaml"} {
		info, err := fs.Stat(fsys, name)
		if err != nil || info.Mode().Type() != fs.ModeSymlink || info.Mode().IsRegular() {
			t.Fatalf("Stat %s = %v, %v; want a symlink", name, info.Mode(), err)
		}
		f, err := fsys.Open(name)
		if err != nil {
			t.Fatalf("Open %s: %v", name, err)
		}
		fi, _ := f.Stat()
		b, _ := io.ReadAll(f)
		f.Close()
		if fi.Mode().Type() != fs.ModeSymlink || strings.Contains(string(b), "kind:") || strings.Contains(string(b), "root:") {
			t.Fatalf("Open %s followed the link: mode %v, content %q", name, fi.Mode(), b)
		}
	}
	rl, ok := fsys.(fs.ReadLinkFS)
	if !ok {
		t.Fatal("not a ReadLinkFS")
	}
	if target, err := rl.ReadLink("a/escape.yaml"); err != nil || target != "../../etc/passwd" {
		t.Fatalf("ReadLink = %q, %v", target, err)
	}
	if _, err := rl.ReadLink("a/d.yaml"); err == nil {
		t.Fatal("ReadLink of a regular file succeeded")
	}
	// A path through a directory symlink does not resolve.
	if _, err := fs.Stat(fsys, "dirlink/d.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat through a symlink: %v, want ErrNotExist", err)
	}
	if _, err := fs.ReadDir(fsys, "dirlink"); err == nil {
		t.Fatal("ReadDir of a symlink succeeded")
	}

	// A submodule is neither a directory nor a regular file, and has no
	// content here.
	info, err := fs.Stat(fsys, "vendor/mod")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Type() != fs.ModeIrregular || info.IsDir() || info.Mode().IsRegular() {
		t.Fatalf("submodule mode = %v, want irregular", info.Mode())
	}
	if b, err := fs.ReadFile(fsys, "vendor/mod"); err != nil || len(b) != 0 {
		t.Fatalf("submodule content = %q, %v", b, err)
	}
	if _, err := fs.ReadDir(fsys, "vendor/mod"); err == nil {
		t.Fatal("ReadDir of a submodule succeeded")
	}
}

func TestTreeFSErrors(t *testing.T) {
	w, _, _ := oddRepo(t)
	fsys, _, err := OpenRevision(w.Dir(), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/a", "a/../a", "", "a/", "./a"} {
		if _, err := fsys.Open(name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", name, err)
		}
	}
	for _, name := range []string{"nope", "a/nope", "a/d.yaml/x", "a/b/c.yaml/d"} {
		_, err := fsys.Open(name)
		var pe *fs.PathError
		if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Path != name {
			t.Errorf("Open(%q) = %v, want a PathError with ErrNotExist", name, err)
		}
	}
	if _, err := fs.ReadFile(fsys, "a"); err == nil {
		t.Error("ReadFile of a directory succeeded")
	}
	if _, err := fs.ReadDir(fsys, "a/d.yaml"); err == nil {
		t.Error("ReadDir of a file succeeded")
	}
	f, err := fsys.Open("a/d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := f.Read(make([]byte, 1)); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("Read after Close = %v, want ErrClosed", err)
	}
}

func TestOpenRevision(t *testing.T) {
	w := gittest.NewWorkdir(t, "")
	w.Write("m/x.yaml", "v: 1\n")
	first := w.Commit("one")
	w.Run("tag", "v1")
	w.Write("m/x.yaml", "v: 2\n")
	second := w.Commit("two")
	// An uncommitted edit is not part of any revision.
	w.Write("m/x.yaml", "v: dirty\n")

	cases := []struct{ rev, sha, content string }{
		{"HEAD", second, "v: 2\n"},
		{"main", second, "v: 2\n"},
		{"HEAD~1", first, "v: 1\n"},
		{"v1", first, "v: 1\n"},
		{first, first, "v: 1\n"},
		{first[:10], first, "v: 1\n"},
	}
	for _, c := range cases {
		fsys, sha, err := OpenRevision(w.Dir()+"/m", c.rev)
		if err != nil {
			t.Fatalf("OpenRevision(%q): %v", c.rev, err)
		}
		if sha != c.sha {
			t.Fatalf("OpenRevision(%q) resolved %s, want %s", c.rev, sha, c.sha)
		}
		if got := readFile(t, fsys, "m/x.yaml"); got != c.content {
			t.Fatalf("OpenRevision(%q): m/x.yaml = %q, want %q", c.rev, got, c.content)
		}
	}

	if _, _, err := OpenRevision(w.Dir(), "nope"); !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown revision: %v", err)
	}
	if _, _, err := OpenRevision(t.TempDir(), "HEAD"); err == nil || !strings.Contains(err.Error(), "open repository") {
		t.Fatalf("not a repository: %v", err)
	}
}

// TestTreeFSTreeHash checks that a commit's file system names each
// directory's tree, as git rev-parse gives it, and nothing else.
func TestTreeFSTreeHash(t *testing.T) {
	w, _, _ := oddRepo(t)
	fsys, _, err := OpenRevision(w.Dir(), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	h, ok := fsys.(interface{ TreeHash(string) (string, bool) })
	if !ok {
		t.Fatal("a commit's file system has no TreeHash")
	}
	for name, rev := range map[string]string{".": "HEAD^{tree}", "a": "HEAD:a", "a/b": "HEAD:a/b"} {
		want := "git-tree:" + strings.TrimSpace(w.Run("rev-parse", rev))
		if got, ok := h.TreeHash(name); !ok || got != want {
			t.Errorf("TreeHash(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"a/b/c.yaml", "link.yaml", "dirlink", "vendor/mod", "missing", "a/b/c.yaml/x", "../x", ""} {
		if got, ok := h.TreeHash(name); ok {
			t.Errorf("TreeHash(%s) = %q: want none", name, got)
		}
	}
}

// TestTreeFSContentHash checks that a commit's file system names each
// regular file's blob, as git hash-object computes it, and nothing else.
func TestTreeFSContentHash(t *testing.T) {
	w, _, _ := oddRepo(t)
	fsys, _, err := OpenRevision(w.Dir(), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	h, ok := fsys.(interface{ ContentHash(string) (string, bool) })
	if !ok {
		t.Fatal("a commit's file system has no ContentHash")
	}
	for _, name := range []string{"a/b/c.yaml", "empty.yaml", "run.sh"} {
		want := "git-blob:" + strings.TrimSpace(w.Run("hash-object", name))
		if got, ok := h.ContentHash(name); !ok || got != want {
			t.Errorf("ContentHash(%s) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"link.yaml", "dirlink", "vendor/mod", "a", ".", "missing.yaml", "a/b/c.yaml/x", "../x"} {
		if got, ok := h.ContentHash(name); ok {
			t.Errorf("ContentHash(%s) = %q: want none", name, got)
		}
	}
	// A directory's copy knows no hashes: its loader hashes what it reads.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("v: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := NewDir(DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := snap.FS.(interface{ ContentHash(string) (string, bool) }).ContentHash("x.yaml"); ok {
		t.Errorf("a directory's ContentHash(x.yaml) = %q: want none", got)
	}
}
