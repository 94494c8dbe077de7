package talos

import (
	"errors"
	"strings"
	"testing"
)

// FuzzMachineConfigPatch feeds arbitrary patch text to MachineConfig: it
// must either give a config that loads and validates, or a *PatchError that
// names the patch; never a panic, never another kind of error.
func FuzzMachineConfigPatch(f *testing.F) {
	for _, seed := range []string{
		"machine:\n  nodeLabels:\n    a: b\n",
		"cluster:\n  network:\n    podSubnets: [10.1.0.0/16]\n",
		"- op: add\n  path: /machine/sysctls\n  value: {a: \"1\"}\n",
		"[{\"op\":\"remove\",\"path\":\"/cluster\"}]",
		"apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: a\n",
		"apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n",
		"machine:\n  $patch: delete\n",
		"---\n---\n",
		"machine: &a [*a]\n",
		"machine:\n  type: init\n",
		"{}",
		"@/etc/passwd",
		"/etc/passwd",
	} {
		f.Add(seed)
	}
	in := baseInput(f, RoleControlPlane)
	f.Fuzz(func(t *testing.T, patch string) {
		in := in
		p := Patch{Name: "fuzz", Source: "fuzz.yaml:1", Patch: patch}
		in.Patches = []Patch{p}
		out, err := MachineConfig(in)
		if err == nil {
			load(t, out, ModeCloud)
			return
		}
		var pe *PatchError
		if !errors.As(err, &pe) || pe.Patch != p {
			t.Fatalf("error %T %q does not name the patch", err, err)
		}
		if !strings.HasPrefix(err.Error(), `config patch "fuzz" (fuzz.yaml:1): `) {
			t.Fatalf("error %q", err)
		}
	})
}
