package sources

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newTestDir(t *testing.T, opts DirOptions) *Dir {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger, _ = testLogger(t)
	}
	d, err := NewDir(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDirSnapshot(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a/b/c.yaml":  "kind: Tenant\n",
		"a/d.yaml":    "kind: NodeGroup\n",
		"empty.yaml":  "",
		".git/config": "[core]\n",
		"a/.git":      "gitdir: elsewhere\n",
	})
	if err := os.Symlink("a/d.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../etc/passwd", filepath.Join(dir, "a", "escape.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newTestDir(t, DirOptions{Path: dir})
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.Revision, "sha256:") || len(snap.Revision) != len("sha256:")+64 {
		t.Fatalf("Revision = %q", snap.Revision)
	}
	if snap.Source != dir || snap.Ref != "" || snap.Root != "." {
		t.Fatalf("snapshot = %+v", snap)
	}
	if err := fstest.TestFS(snap.FS, "a/b/c.yaml", "a/d.yaml", "empty.yaml", "link.yaml", "dirlink", "a/escape.yaml", "fifo"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".git", ".git/config", "a/.git"} {
		if _, err := fs.Stat(snap.FS, name); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s is in the snapshot: %v", name, err)
		}
	}
	// The same checks as for a commit's tree, minus the submodule.
	info, err := fs.Stat(snap.FS, "fifo")
	if err != nil || info.Mode().Type() != fs.ModeIrregular {
		t.Fatalf("fifo: %v, %v; want irregular", info.Mode(), err)
	}
	for _, name := range []string{"link.yaml", "a/escape.yaml", "dirlink"} {
		info, err := fs.Stat(snap.FS, name)
		if err != nil || info.Mode().Type() != fs.ModeSymlink {
			t.Fatalf("%s: %v, %v; want a symlink", name, info.Mode(), err)
		}
	}
	if target, err := snap.FS.(fs.ReadLinkFS).ReadLink("a/escape.yaml"); err != nil || target != "../../etc/passwd" {
		t.Fatalf("ReadLink = %q, %v", target, err)
	}
	if b, _ := fs.ReadFile(snap.FS, "link.yaml"); strings.Contains(string(b), "kind") {
		t.Fatalf("reading a symlink followed it: %q", b)
	}
	if _, err := fs.Stat(snap.FS, "dirlink/d.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat through a symlink: %v", err)
	}
}

func TestDirHashStable(t *testing.T) {
	files := map[string]string{"a/x.yaml": "x: 1\n", "a.yaml": "a\n", "b/c/d.yaml": "d\n"}
	one, two := t.TempDir(), t.TempDir()
	writeFiles(t, one, files)
	writeFiles(t, two, files)
	s1, err := newTestDir(t, DirOptions{Path: one}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := newTestDir(t, DirOptions{Path: two}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s1.Revision != s2.Revision {
		t.Fatalf("same content, different revisions: %s, %s", s1.Revision, s2.Revision)
	}
	// Modification times and empty directories do not count.
	future := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(two, "a.yaml"), future, future)
	os.Mkdir(filepath.Join(two, "emptydir"), 0o755)
	s3, _ := newTestDir(t, DirOptions{Path: two}).Snapshot()
	if s3.Revision != s1.Revision {
		t.Fatal("mtime or an empty directory changed the revision")
	}

	// Content, names and moves do.
	seen := map[string]string{s1.Revision: "original"}
	for what, change := range map[string]func(dir string){
		"content": func(dir string) { writeFiles(t, dir, map[string]string{"a.yaml": "b\n"}) },
		"rename":  func(dir string) { os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "z.yaml")) },
		"move": func(dir string) {
			os.Rename(filepath.Join(dir, "a", "x.yaml"), filepath.Join(dir, "b", "x.yaml"))
		},
		"boundary": func(dir string) {
			// "a.yaml"+"a\n" must not collide with "a.yam"+"la\n".
			os.Remove(filepath.Join(dir, "a.yaml"))
			writeFiles(t, dir, map[string]string{"a.yam": "la\n"})
		},
		"symlink": func(dir string) { os.Symlink("a.yaml", filepath.Join(dir, "l")) },
	} {
		dir := t.TempDir()
		writeFiles(t, dir, files)
		change(dir)
		s, err := newTestDir(t, DirOptions{Path: dir}).Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[s.Revision]; ok {
			t.Fatalf("%s: same revision as %s", what, prev)
		}
		seen[s.Revision] = what
	}
}

func TestDirSnapshotImmutable(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"t.yaml": "v: 1\n", "sub/n.yaml": "n: 1\n"})
	d := newTestDir(t, DirOptions{Path: dir})
	snap, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"t.yaml": "v: 2\n", "new.yaml": "new\n"})
	os.RemoveAll(filepath.Join(dir, "sub"))

	if got := readFile(t, snap.FS, "t.yaml"); got != "v: 1\n" {
		t.Fatalf("t.yaml after an edit = %q", got)
	}
	if got := readFile(t, snap.FS, "sub/n.yaml"); got != "n: 1\n" {
		t.Fatalf("sub/n.yaml after removal = %q", got)
	}
	if _, err := fs.Stat(snap.FS, "new.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a file created later appears in the snapshot")
	}
	// Changing bytes returned by ReadFile does not change the snapshot.
	b, _ := fs.ReadFile(snap.FS, "t.yaml")
	b[0] = 'X'
	if got := readFile(t, snap.FS, "t.yaml"); got != "v: 1\n" {
		t.Fatalf("t.yaml after modifying a read = %q", got)
	}
	again, _ := d.Snapshot()
	if again.Revision == snap.Revision || readFile(t, again.FS, "t.yaml") != "v: 2\n" {
		t.Fatal("a new snapshot does not see the edit")
	}
}

func TestDirLimits(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a": strings.Repeat("x", 600), "b": strings.Repeat("y", 600)})
	_, err := newTestDir(t, DirOptions{Path: dir, MaxBytes: 1000}).Snapshot()
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "1000 bytes") {
		t.Fatalf("byte limit: %v", err)
	}
	_, err = newTestDir(t, DirOptions{Path: dir, MaxFiles: 1}).Snapshot()
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1 files") {
		t.Fatalf("file limit: %v", err)
	}
	d := newTestDir(t, DirOptions{Path: dir, MaxFiles: 1})
	d.Snapshot()
	if st := d.Status(); st.Failures != 1 || !strings.Contains(st.LastError, "too large") {
		t.Fatalf("status = %+v", st)
	}

	if _, err := NewDir(DirOptions{Path: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("NewDir of a missing directory succeeded")
	}
	if _, err := NewDir(DirOptions{Path: filepath.Join(dir, "a")}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("NewDir of a file: %v", err)
	}
}

// A part of the tree that cannot be read fails the snapshot: leaving it out
// would look like a deletion. Here the path is longer than the kernel
// accepts (which stops root too).
func TestDirUnreadableIsAnError(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ok.yaml": "a\n"})
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 250)
	for range 20 {
		if err := r.Mkdir(name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := r.OpenRoot(name)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		r = next
	}
	r.Close()
	_, err = newTestDir(t, DirOptions{Path: dir}).Snapshot()
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("unreadable subdirectory: %v; want an error, not a snapshot without it", err)
	}
}

func TestDirWatch(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"t.yaml": "v: 0\n"})
	debounce := 300 * time.Millisecond
	d := newTestDir(t, DirOptions{Path: dir, Debounce: debounce})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot, 10)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, out) }()

	first := receive(t, out)
	if readFile(t, first.FS, "t.yaml") != "v: 0\n" {
		t.Fatal("first snapshot content")
	}
	waitFor(t, "Run watching", func() bool { return d.Status().Polls == 1 })

	// A burst of writes, each much sooner than the debounce after the
	// last, is one snapshot of the final content.
	for i := 1; i <= 10; i++ {
		writeFiles(t, dir, map[string]string{"t.yaml": "v: " + string(rune('0'+i%10)) + "\n", "burst.yaml": strings.Repeat("b", i)})
		time.Sleep(debounce / 15)
	}
	snap := receive(t, out)
	if got := readFile(t, snap.FS, "burst.yaml"); got != strings.Repeat("b", 10) {
		t.Fatalf("snapshot after the burst has burst.yaml = %q", got)
	}
	time.Sleep(3 * debounce)
	select {
	case s := <-out:
		t.Fatalf("a second snapshot for one burst: %s", s.Revision)
	default:
	}
	if n := d.Status().Polls; n != 2 {
		t.Fatalf("the burst made %d reads in all, want 2", n)
	}

	// A new subdirectory is watched, and so is one created inside it.
	writeFiles(t, dir, map[string]string{"new/deeper/n.yaml": "n\n"})
	snap = receive(t, out)
	waitForFile := func(name, content string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if b, err := fs.ReadFile(snap.FS, name); err == nil && string(b) == content {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no snapshot with %s = %q", name, content)
			}
			snap = receive(t, out)
		}
	}
	waitForFile("new/deeper/n.yaml", "n\n")
	writeFiles(t, dir, map[string]string{"new/deeper/n.yaml": "n2\n"})
	snap = receive(t, out)
	waitForFile("new/deeper/n.yaml", "n2\n")

	// Writes under .git and touching a file without changing it send nothing.
	writeFiles(t, dir, map[string]string{".git/HEAD": "ref: refs/heads/main\n"})
	now := time.Now()
	os.Chtimes(filepath.Join(dir, "t.yaml"), now, now)
	writeFiles(t, dir, map[string]string{"t.yaml": readFile(t, snap.FS, "t.yaml")})
	time.Sleep(3 * debounce)
	select {
	case s := <-out:
		t.Fatalf("a snapshot without a content change: %s", s.Revision)
	default:
	}

	// Trigger reads now; without a change it sends nothing.
	polls := d.Status().Polls
	d.Trigger()
	waitFor(t, "triggered read", func() bool { return d.Status().Polls > polls })

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestDirWatchFailureKeepsGoing(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"t.yaml": "v: 0\n"})
	d := newTestDir(t, DirOptions{Path: dir, Debounce: 50 * time.Millisecond, MaxBytes: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Snapshot, 10)
	go d.Run(ctx, out)
	first := receive(t, out)

	writeFiles(t, dir, map[string]string{"big.yaml": strings.Repeat("x", 200)})
	waitFor(t, "a failed read", func() bool { return d.Status().Failures > 0 })
	if st := d.Status(); st.Revision != first.Revision || !strings.Contains(st.LastError, "too large") {
		t.Fatalf("status = %+v", st)
	}
	os.Remove(filepath.Join(dir, "big.yaml"))
	writeFiles(t, dir, map[string]string{"t.yaml": "v: 1\n"})
	snap := receive(t, out)
	if readFile(t, snap.FS, "t.yaml") != "v: 1\n" || d.Status().Failures != 0 {
		t.Fatalf("after the fix: %+v", d.Status())
	}
}
