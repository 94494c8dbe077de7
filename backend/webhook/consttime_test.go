package webhook

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// The signature and the token are compared in constant time: the
// functions that check them call hmac.Equal, and no source file of the
// package compares bytes or strings with bytes.Equal, bytes.Compare,
// strings.Compare or ==/!= on anything but lengths, nil and constants.
func TestConstantTimeCompare(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			seen := map[string]bool{}
			calls[fn.Name.Name] = seen
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok {
							call := x.Name + "." + sel.Sel.Name
							seen[call] = true
							switch call {
							case "bytes.Equal", "bytes.Compare", "strings.Compare", "strings.EqualFold":
								t.Errorf("%s: %s in %s is not constant-time", fset.Position(n.Pos()), call, fn.Name.Name)
							}
						}
					}
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) && (fn.Name.Name == "verifyHMAC" || fn.Name.Name == "verifyToken") &&
						!harmless(n.X) && !harmless(n.Y) {
						t.Errorf("%s: %s compares with %s", fset.Position(n.Pos()), fn.Name.Name, n.Op)
					}
				}
				return true
			})
		}
	}
	for _, fn := range []string{"verifyHMAC", "verifyToken"} {
		if !calls[fn]["hmac.Equal"] && !calls[fn]["subtle.ConstantTimeCompare"] {
			t.Errorf("%s does not compare with hmac.Equal or subtle.ConstantTimeCompare", fn)
		}
	}
}

// harmless reports whether one side of a comparison is a constant, nil,
// a length or a named size, none of which is secret.
func harmless(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.Ident:
		return e.Name == "nil" || e.Name == "true" || e.Name == "false"
	case *ast.SelectorExpr:
		return e.Sel.Name == "Size"
	case *ast.CallExpr:
		id, ok := e.Fun.(*ast.Ident)
		return ok && id.Name == "len"
	}
	return false
}
