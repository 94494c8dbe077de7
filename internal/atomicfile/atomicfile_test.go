package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	if err := Write(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "two" {
		t.Fatalf("content %q, %v; want two", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %04o, want 0640", fi.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "config" {
		t.Errorf("dir holds %v, want only config: a temporary file was left", names)
	}
}

// A write that fails leaves the old file as it was and no temporary file.
func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.Mkdir(path, 0o700); err != nil { // rename over a directory fails
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "inside"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	if b, err := os.ReadFile(filepath.Join(path, "inside")); err != nil || string(b) != "old" {
		t.Errorf("old content %q, %v", b, err)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "target" {
		t.Errorf("dir holds %v after a failed write, want only target", names)
	}
	if err := Write(filepath.Join(dir, "missing", "file"), []byte("x"), 0o600); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

// A relative path writes into the working directory.
func TestWriteRelative(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := Write("plain", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile("plain"); err != nil || string(b) != "x" {
		t.Fatalf("content %q, %v", b, err)
	}
}

// A streamed write that fails leaves no file and no temporary file;
// CreateFrom refuses a path that exists and leaves it as it was.
func TestWriteFromAndCreateFrom(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "backup.tar")
	broken := errors.New("the stream broke off")
	err := CreateFrom(path, 0o600, func(w io.Writer) error {
		w.Write([]byte("half"))
		return broken
	})
	if !errors.Is(err, broken) {
		t.Fatalf("CreateFrom = %v, want the stream's error", err)
	}
	if names := entries(t, dir); len(names) != 0 {
		t.Fatalf("dir holds %v after a failed stream, want nothing", names)
	}
	stream := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := CreateFrom(path, 0o600, stream("first")); err != nil {
		t.Fatal(err)
	}
	if err := CreateFrom(path, 0o600, stream("second")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateFrom over an existing file = %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Errorf("content %q after a refused CreateFrom, want first", b)
	}
	if err := WriteFrom(path, 0o600, stream("third")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if b, _ := os.ReadFile(path); string(b) != "third" || err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("content %q mode %v (%v), want third and 0600", b, fi.Mode(), err)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("dir holds %v, want only backup.tar", names)
	}
}

// A File written in a stream replaces its target only on Commit; until
// then the target keeps its content and the data is readable at Name. An
// aborted File leaves the target as it was and no temporary file.
func TestCreateCommitAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("new "))
	f.Write([]byte("content"))
	if b, _ := os.ReadFile(f.Name()); string(b) != "new content" {
		t.Errorf("the temporary file holds %q before Commit", b)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("the target holds %q before Commit, want old", b)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new content" {
		t.Errorf("the target holds %q after Commit", b)
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}
	f.Abort() // after Commit: nothing

	g, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("half"))
	g.Abort()
	if b, _ := os.ReadFile(path); string(b) != "new content" {
		t.Errorf("the target holds %q after Abort", b)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "store.db" {
		t.Errorf("dir holds %v after Abort, want only store.db", names)
	}
}
