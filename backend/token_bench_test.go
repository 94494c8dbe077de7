package backend

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkTokensCheck measures a token check with its last-use record,
// from many goroutines at once, against a file of 20 tokens.
func BenchmarkTokensCheck(b *testing.B) {
	var lines []string
	var secrets []string
	for i := range 20 {
		tok, line, err := NewToken(fmt.Sprintf("t%d", i), RoleEdit)
		if err != nil {
			b.Fatal(err)
		}
		secrets = append(secrets, tok)
		lines = append(lines, line)
	}
	path := filepath.Join(b.TempDir(), "tokens")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	toks, err := LoadTokens(path)
	if err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := toks.check("", secrets[i%len(secrets)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
