package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// expectation is one line of a bad case's want.txt:
// "file:line[:column]: message substring".
type expectation struct {
	file      string
	line, col int
	message   string
}

func (e expectation) String() string {
	if e.col > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.file, e.line, e.col, e.message)
	}
	return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.message)
}

func (e expectation) matches(p Problem) bool {
	return p.File == e.file && p.Line == e.line && (e.col == 0 || p.Column == e.col) && strings.Contains(p.Message, e.message)
}

func readExpectations(t *testing.T, name string) []expectation {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []expectation
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		where, msg, ok := strings.Cut(line, ": ")
		parts := strings.Split(where, ":")
		if !ok || len(parts) < 2 || len(parts) > 3 {
			t.Fatalf("%s:%d: want file:line[:col]: message", name, i+1)
		}
		e := expectation{file: parts[0], message: msg}
		e.line, err = strconv.Atoi(parts[1])
		if err == nil && len(parts) == 3 {
			e.col, err = strconv.Atoi(parts[2])
		}
		if err != nil {
			t.Fatalf("%s:%d: %v", name, i+1, err)
		}
		out = append(out, e)
	}
	return out
}

// checkProblems asserts that err is a *ProblemList whose problems are
// exactly those expected: each expectation matches its own problem and no
// problem is left over.
func checkProblems(t *testing.T, d *Desired, err error, want []expectation) {
	t.Helper()
	if d != nil {
		t.Errorf("Load returned a desired state along with problems")
	}
	var list *ProblemList
	if !errors.As(err, &list) {
		t.Fatalf("Load error = %v, want a *ProblemList", err)
	}
	used := make([]bool, len(list.Problems))
	for _, e := range want {
		found := false
		for i, p := range list.Problems {
			if !used[i] && e.matches(p) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("missing problem %s", e)
		}
	}
	for i, p := range list.Problems {
		if !used[i] {
			t.Errorf("unexpected problem %s", p)
		}
		if p.Message == "" || p.File == "" {
			t.Errorf("incomplete problem %+v", p)
		}
	}
}

// TestLoadBad loads every case under testdata/bad and checks that Load finds
// exactly the problems its want.txt lists, with file, line and message.
func TestLoadBad(t *testing.T) {
	cases, err := os.ReadDir(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 25 {
		t.Fatalf("only %d bad cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name(), func(t *testing.T) {
			dir := filepath.Join("testdata", "bad", c.Name())
			want := readExpectations(t, filepath.Join(dir, "want.txt"))
			d, err := Load(os.DirFS(dir), ".", nil)
			checkProblems(t, d, err, want)
		})
	}
}

var _ fs.FS = os.DirFS(".")
