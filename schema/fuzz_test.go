package schema

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// FuzzLoad feeds arbitrary bytes to Load as one manifest file. Whatever the
// input, Load must not panic, must answer either a desired state or problems
// (never both, never neither), and every problem must name the file and say
// something. The seeds are every manifest under testdata and examples, so
// plain `go test` runs them.
func FuzzLoad(f *testing.F) {
	for _, root := range []string{"testdata", filepath.Join("..", "examples")} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !isManifestName(d.Name()) {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			f.Add(data)
			return nil
		})
		if err != nil {
			f.Fatal(err)
		}
	}
	f.Add([]byte(validTenant + "---\n" + validTenant))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("\xef\xbb\xbfapiVersion: rezuscloud.io/v1\nkind: Tenant\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{"m.yaml": {Data: data, Mode: 0o644}}
		d, err := Load(fsys, ".", &Options{MaxDepth: 20})
		if err == nil {
			if d == nil {
				t.Fatal("no desired state and no error")
			}
			if d.Files != 1 {
				t.Fatalf("files = %d", d.Files)
			}
			return
		}
		if d != nil {
			t.Fatal("a desired state along with an error")
		}
		var list *ProblemList
		if !errors.As(err, &list) || len(list.Problems) == 0 {
			t.Fatalf("error %v is not a non-empty *ProblemList", err)
		}
		for _, p := range list.Problems {
			if p.File != "m.yaml" || p.Message == "" || p.Line < 0 || p.Column < 0 {
				t.Fatalf("bad problem %+v", p)
			}
			if strings.Contains(p.Message, "internal error") {
				t.Fatalf("Load recovered from a panic: %s", p)
			}
		}
	})
}
