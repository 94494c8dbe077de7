package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rule forbids the packages under one path to depend on those under
// others, except on the allowed ones.
type rule struct {
	pkgs    string
	never   []string
	allowed []string
	// tests includes the package's test files.
	tests bool
	// leaf forbids every package of the module.
	leaf bool
}

var rules = []rule{
	{pkgs: "store", never: []string{"backend", "reconciler", "render", "cmd", "sources"}, tests: true},
	{pkgs: "reconciler", never: []string{"backend"}, allowed: []string{"backend/api"}},
	{pkgs: "internal/backoff", leaf: true, tests: true},
}

func TestImportRules(t *testing.T) {
	root, module := moduleRoot(t)
	code, withTests := importGraph(t, root, module, false), importGraph(t, root, module, true)
	for _, r := range rules {
		own := code
		if r.tests {
			own = withTests
		}
		for pkg, deps := range own {
			if !under(pkg, r.pkgs) {
				continue
			}
			for _, dep := range forbidden(code, pkg, deps, r) {
				t.Errorf("%s depends on %s (%s), which it must not: %s", pkg, dep.pkg, strings.Join(dep.path, " → "), ruleText(r))
			}
		}
	}
}

func ruleText(r rule) string {
	if r.leaf {
		return r.pkgs + " must import nothing of the module"
	}
	s := r.pkgs + " must not import " + strings.Join(r.never, ", ")
	if len(r.allowed) > 0 {
		s += " (but " + strings.Join(r.allowed, ", ") + ")"
	}
	return s
}

// under reports whether the package path pkg (relative to the module) is
// dir or below it.
func under(pkg, dir string) bool {
	return pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

type hit struct {
	pkg  string
	path []string
}

// forbidden walks the module packages that pkg, importing deps, depends
// on through graph, and returns those r forbids, each with the chain of
// imports that reaches it.
func forbidden(graph map[string][]string, pkg string, deps []string, r rule) []hit {
	var out []hit
	seen := map[string]bool{pkg: true}
	var queue [][]string
	for _, dep := range deps {
		queue = append(queue, []string{pkg, dep})
	}
	for len(queue) > 0 {
		chain := queue[0]
		queue = queue[1:]
		dep := chain[len(chain)-1]
		if seen[dep] {
			continue
		}
		seen[dep] = true
		switch {
		case slices.ContainsFunc(r.allowed, func(a string) bool { return under(dep, a) }):
		case r.leaf, slices.ContainsFunc(r.never, func(n string) bool { return under(dep, n) }):
			out = append(out, hit{pkg: dep, path: chain})
		default:
			for _, next := range graph[dep] {
				queue = append(queue, append(slices.Clone(chain), next))
			}
		}
	}
	return out
}

// moduleRoot returns the directory of the module's go.mod, above this
// package, and the module's path.
func moduleRoot(t *testing.T) (string, string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if m, ok := strings.CutPrefix(line, "module "); ok {
					return dir, strings.TrimSpace(m)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// importGraph returns, for every package of the module (by its path
// relative to the module), the module's packages its Go files import;
// test files too when tests is set. Directories of other modules,
// testdata and hidden ones are left out.
func importGraph(t *testing.T, root, module string, tests bool) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || isModule(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || (!tests && strings.HasSuffix(name, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if dep, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(graph[pkg], dep) {
				graph[pkg] = append(graph[pkg], dep)
			}
		}
		if _, ok := graph[pkg]; !ok {
			graph[pkg] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return graph
}

// isModule reports whether dir holds a module of its own.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}
