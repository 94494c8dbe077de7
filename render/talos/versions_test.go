package talos

import (
	"strings"
	"testing"
)

func TestCheckVersions(t *testing.T) {
	for _, tc := range []struct {
		talos, k8s string
		want       string // "" for no error
	}{
		{"1.12.6", "1.34.1", ""},
		{"v1.12.6", "v1.35.0", ""},
		{"1.12.0", "1.30.0", ""},
		{"1.11.5", "1.34.1", ""},
		{"1.12.6", "1.29.9", "too old to be used with Talos"},
		{"1.12.6", "1.36.0", "too new to be used with Talos"},
		{"1.9.0", "1.34.1", "too new to be used with Talos"},
		{"1.13.0", "1.36.2", ""},
		{"1.13.0", "1.30.9", "too old to be used with Talos"},
		{"1.14.1", "1.37.2", ""},
		{"v1.14.0", "1.32.0", ""},
		{"1.14.1", "1.31.9", "too old to be used with Talos"},
		{"1.14.1", "1.38.0", "too new to be used with Talos"},
		{"1.15.0", "1.35.0", `talos version "1.15.0": newer than v1.14, the newest this build can render`},
		{"1.1.0", "1.24.0", "compatibility with version"},
		{"x", "1.34.1", `talos version "x"`},
		{"1.12.6", "one", `kubernetes version "one": not of the form 1.34.1`},
		{"1.12.6", "1.34", `kubernetes version "1.34": not of the form 1.34.1`},
	} {
		err := CheckVersions(tc.talos, tc.k8s)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckVersions(%s, %s) = %v", tc.talos, tc.k8s, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckVersions(%s, %s) = %v, want an error containing %q", tc.talos, tc.k8s, err, tc.want)
		}
	}
}
