package reconciler

import (
	"strings"
	"testing"
)

// TestSkipsMinor: an upgrade of more than one minor version is named, with
// the version to go to first; the same minor, the next one, a downgrade and
// another major are not.
func TestSkipsMinor(t *testing.T) {
	for _, c := range []struct {
		from, to, want string
	}{
		{"1.34.1", "1.34.3", ""},
		{"1.34.1", "1.35.0", ""},
		{"1.34.1", "v1.35.2", ""},
		{"1.35.0", "1.34.1", ""},
		{"1.34.1", "2.0.0", ""},
		{"", "1.36.0", ""},
		{"1.34.1", "1.36.0", "kubernetesVersion 1.36.0 skips 1.35: the cluster runs 1.34.1, and Kubernetes is upgraded one minor version at a time; upgrade to 1.35.x first"},
		{"1.34.1", "1.37.2", "skips 1.35"},
	} {
		if got := skipsMinor(c.from, c.to); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("skipsMinor(%q, %q) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}
