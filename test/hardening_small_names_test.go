package test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// controlNames are manifest paths with control characters, and how the
// problems name them.
var controlNames = map[string]string{
	"bad\x01.yaml":      `bad\x01.yaml`,
	"tab\there.yml":     `tab\there.yml`,
	"del\x7f.yaml":      `del\x7f.yaml`,
	"new\nline.yaml":    `new\nline.yaml`,
	"dir\x02/nest.yaml": `dir\x02/nest.yaml`,
}

// TestHardeningControlCharacterNames loads a tree whose manifest files
// have control characters in their names, from a real git commit and from
// a directory source: each such file is a problem that names the
// character, never a file that "does not exist", and a file of another
// kind with such a name is ignored as other files are.
func TestHardeningControlCharacterNames(t *testing.T) {
	const doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
	files := map[string]string{"ok.yaml": doc, "notes\x01.txt": "not a manifest"}
	for name := range controlNames {
		files[name] = doc
	}

	w := gittest.NewWorkdir(t, "")
	for name, body := range files {
		w.Write(name, body)
	}
	w.Commit("names with control characters")
	gitFS, _, err := sources.OpenRevision(w.Dir(), "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	checkNameProblems(t, "git", gitFS)

	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := sources.NewDir(sources.DirOptions{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	checkNameProblems(t, "dir", snap.FS)
}

func checkNameProblems(t *testing.T, source string, fsys fs.FS) {
	t.Helper()
	_, err := schema.Load(fsys, ".", nil)
	var list *schema.ProblemList
	if !errors.As(err, &list) {
		t.Fatalf("%s: Load: %v, want problems", source, err)
	}
	var files []string
	for _, p := range list.Problems {
		files = append(files, p.File)
		if strings.Contains(p.Message, "does not exist") || !strings.Contains(p.Message, "control character U+00") || !strings.Contains(p.Message, "rename") {
			t.Errorf("%s: %s: %q, want a message that names the control character", source, p.File, p.Message)
		}
	}
	var want []string
	for _, shown := range controlNames {
		want = append(want, shown)
	}
	slices.Sort(files)
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("%s: problems for %q, want one for each of %q", source, files, want)
	}
}
