package notify

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseConfig: any input is read or refused without a panic; a
// refusal names the file, and a ConfigError gives every problem a line.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"providers: [{name: a, type: webhook, address: \"http://127.0.0.1/\"}]\nalerts: [{name: x, providers: [a]}]\n",
		"coalesceWindow: 1m\nmachineNotReadyAfter: 10m\n",
		"providers:\n  - name: a\n    type: matrix\n    channel: \"!r:x\"\n",
		"alerts: [{name: x, providers: [a], tenants: {selector: \"a in (b\"}, exclusionList: [\"(\"]}]\n",
		"a: &x [*x]\n", "- 1\n- 2\n", "{", "providers: [[[]]]\n", "---\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "/nonexistent/n.yaml")
		if err == nil {
			if c == nil {
				t.Fatal("no config and no error")
			}
			return
		}
		if !strings.HasPrefix(err.Error(), "/nonexistent/n.yaml") {
			t.Fatalf("error %q does not start with the file", err)
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			for _, line := range strings.Split(ce.Error(), "\n") {
				if !strings.HasPrefix(line, "/nonexistent/n.yaml:") {
					t.Fatalf("problem %q has no position", line)
				}
			}
		}
	})
}
