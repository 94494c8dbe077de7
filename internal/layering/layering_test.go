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

// rule forbids the packages under some paths to depend on those under
// others, except on the allowed ones.
type rule struct {
	// name says which packages the rule binds, in its failures; default
	// their paths.
	name string
	// pkgs are the paths whose packages the rule binds; "." is every
	// package of the module. except are paths among them it does not bind.
	pkgs, except []string
	never        []string
	allowed      []string
	// tests includes the package's test files.
	tests bool
	// leaf forbids every package of the module.
	leaf bool
}

// The groups of internal/ (see internal/doc.go). Every package under
// internal/ is in one of them (TestInternalGroups).
var (
	// leafUtilities are small pieces that any part of the server may
	// use: they build on schema and each other, and on nothing above.
	leafUtilities = []string{"internal/atomicfile", "internal/backoff", "internal/commitmsg", "internal/labels", "internal/machinelog",
		"internal/metrics", "internal/modeldiff", "internal/preview", "internal/redact", "internal/sopsfile", "internal/supervise", "internal/tfcli", "internal/version", "internal/window"}
	// simulators are the simulated world: the sim cloud's store, its
	// Talos nodes and the simulated OpenStack.
	simulators = []string{"internal/sim"}
	// apiClient is the HTTP client of the API, for rezusctl and tests.
	apiClient = []string{"internal/client"}
	// testKits are for tests and benchmarks only.
	testKits = []string{"internal/etcdtest", "internal/gittest", "internal/kubetest", "internal/layering", "internal/manifestfleet", "internal/oidctest", "internal/servertest", "internal/testenv"}
)

// serverPackages are the packages of the server above the leaf utilities.
var serverPackages = []string{"backend", "events", "history", "reconciler", "render", "sources", "store", "cmd"}

var rules = []rule{
	{pkgs: []string{"store"}, never: []string{"backend", "history", "reconciler", "render", "cmd", "sources"}, tests: true},
	{pkgs: []string{"history"}, never: []string{"backend", "reconciler", "render", "cmd", "sources"}, tests: true},
	{pkgs: []string{"notify"}, never: slices.Concat(serverPackages, []string{"replica", "schema"}), tests: true},
	{pkgs: []string{"events"}, never: []string{"backend", "reconciler", "render", "cmd", "sources"}},
	{pkgs: []string{"reconciler"}, never: []string{"backend"}, allowed: []string{"backend/api"}},
	{pkgs: []string{"backend/sso"}, never: slices.Concat(serverPackages, simulators, apiClient), allowed: []string{"backend/sso"}},
	{name: "the leaf utilities of internal/", pkgs: leafUtilities, never: slices.Concat(simulators, apiClient, testKits, serverPackages)},
	{name: "the simulators", pkgs: simulators, never: slices.Concat(apiClient, testKits, []string{"backend", "reconciler", "sources", "store", "cmd"})},
	{name: "the API client", pkgs: apiClient, never: slices.Concat(simulators, testKits, serverPackages), allowed: []string{"backend/api"}},
	{pkgs: []string{"internal/backoff"}, leaf: true, tests: true},
	{name: "rezusctl", pkgs: []string{"cmd/rezusctl"}, never: []string{"backend", "reconciler", "store", "cmd/rezuscloud"}, allowed: []string{"backend/api"}},
	{name: "code outside tests and benchmarks", pkgs: []string{"."}, except: slices.Concat(testKits, []string{"test", "bench"}), never: testKits},
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
			if !binds(r, pkg) {
				continue
			}
			for _, dep := range forbidden(code, pkg, deps, r) {
				t.Errorf("%s depends on %s (%s), which it must not: %s", pkg, dep.pkg, strings.Join(dep.path, " → "), ruleText(r))
			}
		}
	}
}

func ruleText(r rule) string {
	s := r.name
	if s == "" {
		s = strings.Join(r.pkgs, ", ")
	}
	if r.leaf {
		return s + " must import nothing of the module"
	}
	s += " must not import " + strings.Join(r.never, ", ")
	if len(r.allowed) > 0 {
		s += " (but " + strings.Join(r.allowed, ", ") + ")"
	}
	return s
}

// under reports whether the package path pkg (relative to the module) is
// dir or below it; every package is under ".".
func under(pkg, dir string) bool {
	return dir == "." || pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

// underAny reports whether pkg is under one of dirs.
func underAny(pkg string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return under(pkg, d) })
}

// binds reports whether r binds the package pkg.
func binds(r rule, pkg string) bool {
	return underAny(pkg, r.pkgs) && !underAny(pkg, r.except)
}

// TestInternalGroups: every package under internal/ is in exactly one of
// its groups, so that a new one gets its group's rules.
func TestInternalGroups(t *testing.T) {
	root, module := moduleRoot(t)
	for pkg := range importGraph(t, root, module, true) {
		if !under(pkg, "internal") || pkg == "internal" {
			continue
		}
		var in []string
		for name, group := range map[string][]string{"leaf utilities": leafUtilities, "simulators": simulators, "API client": apiClient, "test kits": testKits} {
			if underAny(pkg, group) {
				in = append(in, name)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s is in %d groups of internal/ %v, want one: add it to leafUtilities, simulators, apiClient or testKits here and to internal/doc.go", pkg, len(in), in)
		}
	}
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
		case underAny(dep, r.allowed):
		case r.leaf, underAny(dep, r.never):
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
