package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
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

// A stream that fails midway leaves the old file as it was and no
// temporary file.
func TestWriteFromReaderError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := Write(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := io.MultiReader(strings.NewReader(strings.Repeat("new", 1<<18)), iotest.ErrReader(errors.New("stream broke")))
	if err := WriteFrom(path, broken, 0o600); err == nil || !strings.Contains(err.Error(), "stream broke") {
		t.Fatalf("WriteFrom of a broken stream: %v, want its error", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "old" {
		t.Errorf("content %q, %v; want old", b, err)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "target" {
		t.Errorf("dir holds %v after a failed write, want only target", names)
	}
}
