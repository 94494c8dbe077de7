package talos

import (
	"errors"
	"strings"
	"testing"
)

// TestPatchErrorEncrypted: the error of a patch that was encrypted in git
// names the patch and where it is, and tells none of its values; the same
// patch in plain text is told as it is.
func TestPatchErrorEncrypted(t *testing.T) {
	for _, tc := range []struct{ name, patch, secret string }{
		{"invalid value", "cluster:\n  network:\n    dnsDomain: \"s3cr3t domain\"\n", "s3cr3t domain"},
		{"unknown key", "machine:\n  registries:\n    config:\n      ghcr.io:\n        auth:\n          passwrd: s3cr3t-password\n", "s3cr3t-password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, encrypted := range []bool{false, true} {
				in := baseInput(t, "worker")
				in.Patches = []Patch{{Name: "creds", Patch: tc.patch, Source: "t/creds.yaml:9", Encrypted: encrypted}}
				_, err := MachineConfig(in)
				var pe *PatchError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a PatchError", err)
				}
				msg := err.Error()
				t.Logf("encrypted %v: %s", encrypted, msg)
				if !strings.HasPrefix(msg, `config patch "creds" (t/creds.yaml:9): `) {
					t.Errorf("error %q does not name the patch", msg)
				}
				if leaked := strings.Contains(msg, tc.secret); leaked == encrypted {
					t.Errorf("encrypted %v: error %q tells the value: %v", encrypted, msg, leaked)
				}
				if encrypted && !strings.Contains(msg, "<encrypted>") {
					t.Errorf("error %q marks no value", msg)
				}
			}
		})
	}
}
