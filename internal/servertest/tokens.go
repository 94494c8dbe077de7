package servertest

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/rezuscloud/rezuscloud/backend"
)

// Tokens makes a token for each name with its role ("view", "edit" or
// "admin"), as `rezuscloud token create` does, and writes the tokens file
// (mode 0600). It returns the file and each name's token.
func Tokens(tb TB, roles map[string]string) (file string, tokens map[string]string) {
	tb.Helper()
	tokens = map[string]string{}
	var lines []string
	for name, r := range roles {
		role, err := backend.ParseRole(r)
		if err != nil {
			tb.Fatalf("token %s: %v", name, err)
		}
		tok, line, err := backend.NewToken(name, role)
		if err != nil {
			tb.Fatalf("token %s: %v", name, err)
		}
		tokens[name] = tok
		lines = append(lines, line)
	}
	file = filepath.Join(tb.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		tb.Fatalf("tokens file: %v", err)
	}
	return file, tokens
}
