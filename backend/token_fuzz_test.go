package backend

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzParseTokens: a tokens file either fails with an error that names
// the file, or parses into tokens whose lines, written out again, parse
// into the same tokens.
func FuzzParseTokens(f *testing.F) {
	digest := hex.EncodeToString(make([]byte, 32))
	f.Add("ci edit " + digest + " expires=2027-01-01T00:00:00Z owner=platform\n")
	f.Add("# c\nops admin " + digest + " owner=alice # x\n\nr view " + digest + "\n")
	f.Add("a view " + digest + " expires=2027-01-01T00:00:00+02:00 expires=x\n")
	f.Fuzz(func(t *testing.T, text string) {
		entries, err := parseTokens("tokens", []byte(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokens") {
				t.Fatalf("error without the file's name: %v", err)
			}
			return
		}
		var lines []string
		for _, e := range entries {
			line := fmt.Sprintf("%s %s %s", e.name, e.role, hex.EncodeToString(e.digest[:]))
			if !e.expires.IsZero() {
				line += " expires=" + e.expires.Format(time.RFC3339Nano)
			}
			if e.owner != "" {
				line += " owner=" + e.owner
			}
			lines = append(lines, line)
		}
		again, err := parseTokens("tokens", []byte(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatalf("the written lines do not parse: %v\n%s", err, strings.Join(lines, "\n"))
		}
		if len(again) != len(entries) {
			t.Fatalf("%d tokens, then %d", len(entries), len(again))
		}
		for i := range entries {
			if !again[i].expires.Equal(entries[i].expires) {
				t.Fatalf("token %d expires %v, then %v", i, entries[i].expires, again[i].expires)
			}
			a, b := again[i], entries[i]
			a.expires, b.expires = time.Time{}, time.Time{}
			if a != b {
				t.Fatalf("token %d: %+v, then %+v", i, b, a)
			}
		}
	})
}
