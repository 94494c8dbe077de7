package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
)

// TestTokenCreateLifecycle: the role as an argument, --expires as a
// duration or a time and --owner end up on the printed line, which loads.
func TestTokenCreateLifecycle(t *testing.T) {
	run := func(args ...string) (string, error) {
		root := newRootCmd(func(string) string { return "" })
		out := new(bytes.Buffer)
		root.SetOut(out)
		root.SetErr(new(bytes.Buffer))
		root.SetArgs(append([]string{"token", "create"}, args...))
		err := root.Execute()
		return out.String(), err
	}
	before := time.Now()
	out, err := run("ci", "edit", "--expires", "720h", "--owner", "platform-team")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ci edit [0-9a-f]{64} expires=(\S+) owner=platform-team$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("token create printed:\n%s", out)
	}
	at, err := time.Parse(time.RFC3339, m[1])
	if err != nil || at.Before(before.Add(720*time.Hour).Truncate(time.Second)) || at.After(time.Now().Add(720*time.Hour)) {
		t.Errorf("expires=%s, want 720h from now", m[1])
	}
	if !strings.Contains(out, `# token "ci" (role edit, expires `+m[1]+"), shown only this once:") {
		t.Errorf("the header does not say when the token expires:\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, []byte(m[0]+"\n"), 0o600)
	if toks, err := backend.LoadTokens(path); err != nil || toks.Len() != 1 {
		t.Fatalf("the printed line does not load: %v", err)
	}

	out, err = run("ops", "--role", "admin", "--expires", "2099-01-01T00:00:00Z")
	if err != nil || !regexp.MustCompile(`(?m)^ops admin [0-9a-f]{64} expires=2099-01-01T00:00:00Z$`).MatchString(out) {
		t.Fatalf("token create ops: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"x", "edit", "--role", "admin"}, "role given twice"},
		{[]string{"x", "--expires", "-1h"}, "want a positive duration"},
		{[]string{"x", "--expires", "2020-01-01T00:00:00Z"}, "is not in the future"},
		{[]string{"x", "--expires", "tomorrow"}, "want a duration such as 720h or an RFC 3339 time"},
		{[]string{"x", "--owner", "two words"}, "owner: token name"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("token create %q: %v, want %q", c.args, err, c.want)
		}
	}
}
