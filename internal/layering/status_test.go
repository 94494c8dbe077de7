package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// statusOwner is the one package that computes and stores the status of
// tenants, node groups and machines.
const statusOwner = "reconciler/status"

// storedOutside are the kinds code outside statusOwner may store: the
// reconciler's records of commits and providers.
var storedOutside = map[string]bool{"KindCommit": true, "KindProvider": true}

// TestStatusOwner: status has one owner, package reconciler/status and
// its Recorder. Outside it, no code of the module stores a Tenant,
// NodeGroup, Machine or ConfigPatch (a PutObject of a kind but
// schema.KindCommit and schema.KindProvider, or of a kind it cannot tell),
// and no code of the reconciler's packages makes a condition (a
// schema.Condition or schema.Conditions literal) or sets one (Set or
// Remove on a Conditions list). The store and its engines store every
// kind, and tests may set up what they like.
func TestStatusOwner(t *testing.T) {
	root, module := moduleRoot(t)
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
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if under(pkg, statusOwner) || under(pkg, "store") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, v := range statusWrites(f, module, under(pkg, "reconciler")) {
			at := fset.Position(v.pos)
			t.Errorf("%s/%s:%d: %s outside %s, the one owner of status: record it through status.Recorder",
				pkg, name, at.Line, v.what, statusOwner)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type statusWrite struct {
	pos  token.Pos
	what string
}

// statusWrites finds in f the writes of status that only statusOwner may
// make: stores of status-bearing kinds and, with conditions, conditions
// made or set.
func statusWrites(f *ast.File, module string, conditions bool) []statusWrite {
	schemaName := importName(f, module+"/schema")
	var out []statusWrite
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch {
			// store.Tx's PutObject(kind, key, obj); an S3 client's PutObject
			// has other arguments.
			case sel.Sel.Name == "PutObject" && len(n.Args) == 3 && !storedOutside[schemaConst(n.Args[0], schemaName)]:
				out = append(out, statusWrite{n.Pos(), "PutObject of " + exprText(n.Args[0])})
			case conditions && (sel.Sel.Name == "Set" || sel.Sel.Name == "Remove") && isConditions(sel.X):
				out = append(out, statusWrite{n.Pos(), "a condition set (Conditions." + sel.Sel.Name + ")"})
			}
		case *ast.CompositeLit:
			if conditions && isConditionType(n.Type, schemaName) {
				out = append(out, statusWrite{n.Pos(), "a condition made (" + exprText(n.Type) + " literal)"})
			}
		}
		return true
	})
	return out
}

// importName is the name f uses for the package path, "" when f does not
// import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

// schemaConst returns the name of the schema constant e is ("KindCommit"
// for schema.KindCommit), "" when e is something else.
func schemaConst(e ast.Expr, schemaName string) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if x, ok := sel.X.(*ast.Ident); ok && schemaName != "" && x.Name == schemaName {
		return sel.Sel.Name
	}
	return ""
}

// isConditions reports whether e is a Conditions list: a field or
// variable named Conditions.
func isConditions(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return e.Sel.Name == "Conditions"
	case *ast.Ident:
		return e.Name == "Conditions"
	}
	return false
}

// isConditionType reports whether t is schema.Condition,
// schema.Conditions or a slice of schema.Condition.
func isConditionType(t ast.Expr, schemaName string) bool {
	if a, ok := t.(*ast.ArrayType); ok {
		t = a.Elt
	}
	name := schemaConst(t, schemaName)
	return name == "Condition" || name == "Conditions"
}

// exprText is e as the source spells a selector or identifier.
func exprText(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.SelectorExpr:
		return exprText(e.X) + "." + e.Sel.Name
	case *ast.Ident:
		return e.Name
	case *ast.ArrayType:
		return "[]" + exprText(e.Elt)
	}
	return "an expression"
}
