package schema

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestManifestNameProblems(t *testing.T) {
	doc := &fstest.MapFile{Data: []byte("apiVersion: v1\nkind: ConfigMap\n")}
	fsys := fstest.MapFS{
		"ok.yaml":          doc,
		"latin1-\xe9.yaml": doc,
		"c1-\u0085.yaml":   doc,
		"bell\a/x.yml":     doc,
		"readme\x01.md":    doc,
	}
	_, err := Load(fsys, ".", nil)
	var list *ProblemList
	if !errors.As(err, &list) {
		t.Fatalf("Load: %v, want problems", err)
	}
	want := map[string]string{
		`latin1-\xe9.yaml`: "not valid UTF-8 (byte 0xe9 at offset 7)",
		`c1-\u0085.yaml`:   "control character U+0085 at offset 3",
		`bell\a/x.yml`:     "control character U+0007 at offset 4",
	}
	if len(list.Problems) != len(want) {
		t.Errorf("problems %v, want %d", list.Problems, len(want))
	}
	for _, p := range list.Problems {
		if w, ok := want[p.File]; !ok || !strings.Contains(p.Message, w) {
			t.Errorf("%s: %q, want a problem containing %q", p.File, p.Message, w)
		}
	}
}
