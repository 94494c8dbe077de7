package main

import (
	"strings"
	"testing"
)

// TestSelectorParsedLocally: get and watch parse -l with the server's
// parser: a bad selector is refused before any request (the server given
// here does not listen), and one Kubernetes accepts, such as x>1, is sent.
func TestSelectorParsedLocally(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	const server = "http://127.0.0.1:1"
	for _, cmd := range [][]string{{"get", "machines"}, {"watch", "machines"}} {
		for sel, bad := range map[string]bool{"a b": true, strings.Repeat("k", 64): true, "k=v\u00a0": true, "x>1": false, "env<10,rezuscloud.io/role in (worker)": false} {
			args := append(append([]string{}, cmd...), "--server", server, "--token", "t0ken-for-tests", "-l", sel)
			code, _, stderr := runCLI(t, args...)
			refused := strings.Contains(stderr, "labelSelector: label selector")
			if code != exitUsage || refused != bad || strings.Contains(stderr, "127.0.0.1:1") == bad {
				t.Errorf("rezusctl %s -l %q: exit %d, stderr %q; want refused before any request: %v", strings.Join(cmd, " "), sel, code, stderr, bad)
			}
		}
	}
}
