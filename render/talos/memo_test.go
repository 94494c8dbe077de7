package talos

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// resetMemos forgets every loaded patch and parsed validation bundle, so
// that the next call computes afresh.
func resetMemos() {
	patchMemo.mu.Lock()
	patchMemo.m = nil
	patchMemo.mu.Unlock()
	validationParsed.Clear()
}

// A config holds pointers into its patch's documents, so a memo that
// handed out the kept patch would let one config change the next.
func TestPatchMemoHandsOutCopies(t *testing.T) {
	const text = "machine:\n  sysctls:\n    net.core.somaxconn: \"1024\"\n"
	first, err := loadPatchOnce(text)
	if err != nil {
		t.Fatal(err)
	}
	// StrategicMerge puts the patch's documents themselves into the config
	// it returns (RawV1Alpha1 of a loaded config is a copy; Documents not).
	sysctls := func(p configpatcher.Patch) map[string]string {
		return p.(configpatcher.StrategicMergePatch).Documents()[0].(*v1alpha1.Config).MachineConfig.MachineSysctls
	}
	sysctls(first)["net.core.somaxconn"] = "changed"
	again, err := loadPatchOnce(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := sysctls(again)["net.core.somaxconn"]; got != "1024" {
		t.Errorf("second load sees %q: the memo handed out its own patch", got)
	}

	const ops = "- op: replace\n  path: /machine/nodeLabels/tier\n  value: gpu\n"
	jp, err := loadPatchOnce(ops)
	if err != nil {
		t.Fatal(err)
	}
	*jp.(jsonpatch.Patch)[0]["value"] = json.RawMessage(`"changed"`)
	jp2, err := loadPatchOnce(ops)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(*jp2.(jsonpatch.Patch)[0]["value"]); got != `"gpu"` {
		t.Errorf("second load of the JSON patch has value %s", got)
	}
}

func TestBundleMemoHandsOutCopies(t *testing.T) {
	b, err := ValidationSecrets("1.12.6")
	if err != nil {
		t.Fatal(err)
	}
	rememberValidationBundle(b) // as ValidationSecrets did, should a test have reset the memo
	if _, kept := validationParsed.Load(sha256.Sum256(b)); !kept {
		t.Fatal("the validation bundle is not kept parsed")
	}
	first, _, err := parseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	first.Cluster.ID = "changed"
	first.Certs.OS.Crt[0] ^= 0xff
	first.Certs.K8sServiceAccount.Key = nil
	first.Clock = secrets.NewFixedClock(testNow)
	again, osCA, err := parseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Cluster.ID != want.Cluster.ID || !bytes.Equal(again.Certs.OS.Crt, want.Certs.OS.Crt) ||
		!bytes.Equal(again.Certs.K8sServiceAccount.Key, want.Certs.K8sServiceAccount.Key) {
		t.Error("a change to one parsed bundle reached the next")
	}
	if again.Clock == first.Clock {
		t.Error("the copies share a clock")
	}
	if ca, _ := want.Certs.OS.GetCert(); !osCA.Equal(ca.NotBefore) {
		t.Errorf("OS CA NotBefore = %v, want %v", osCA, ca.NotBefore)
	}
	if _, _, err := parseSecrets([]byte("not: a bundle\n")); err == nil {
		t.Error("a bad bundle parsed")
	}
	// A tenant's own bundle is not kept.
	if _, err := MachineConfig(baseInput(t, RoleWorker)); err != nil {
		t.Fatal(err)
	}
	if _, kept := validationParsed.Load(sha256.Sum256(testSecrets(t))); kept {
		t.Error("a tenant's bundle stays in memory after its render")
	}
}

// The memos change nothing a caller sees: every config and every error is
// the same, byte for byte, whether its bundle and patches were parsed
// before or not, in either order.
func TestMachineConfigSameWithWarmMemo(t *testing.T) {
	patches := []Patch{
		{Name: "labels", Source: "a.yaml:1", Patch: "machine:\n  nodeLabels:\n    tier: default\n"},
		{Name: "json", Source: "b.yaml:2", Patch: "- op: replace\n  path: /machine/nodeLabels/tier\n  value: gpu\n"},
		{Name: "kmsg", Source: "c.yaml:3", Patch: "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: remote\nurl: tcp://127.0.0.1:3000\n"},
		{Name: "kmsg-again", Source: "d.yaml:4", Patch: "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: remote\nurl: tcp://127.0.0.2:3000\n"},
		{Name: "delete-hostname", Source: "e.yaml:5", Patch: "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n"},
	}
	bad := []Patch{
		{Name: "unknown-field", Source: "f.yaml:6", Patch: "machine:\n  nosuchfield: 1\n"},
		{Name: "bad-dns", Source: "g.yaml:7", Patch: "cluster:\n  network:\n    dnsDomain: \"bad domain!\"\n"},
	}
	validation, err := ValidationSecrets("1.12.6")
	if err != nil {
		t.Fatal(err)
	}
	inputs := []ConfigInput{}
	for _, role := range []string{RoleControlPlane, RoleWorker} {
		in := baseInput(t, role)
		in.Secrets = validation
		in.Patches = patches
		inputs = append(inputs, in)
		for _, b := range bad {
			broken := baseInput(t, role)
			broken.Secrets = validation
			broken.Patches = append([]Patch{patches[0], b}, patches[2:]...)
			inputs = append(inputs, broken)
		}
	}
	outcome := func(in ConfigInput) string {
		out, err := MachineConfig(in)
		return fmt.Sprintf("%x %v", sha256.Sum256(out), err)
	}
	var cold []string
	for _, in := range inputs {
		resetMemos()
		cold = append(cold, outcome(in))
	}
	rememberValidationBundle(validation)
	for range 2 {
		for i, in := range inputs {
			if got := outcome(in); got != cold[i] {
				t.Errorf("input %d: with a warm memo %s, cold %s", i, got, cold[i])
			}
		}
	}
	for i, want := range []string{"<nil>", "unknown keys", "config is invalid after this patch", "<nil>", "unknown keys", "config is invalid after this patch"} {
		if !strings.Contains(cold[i], want) {
			t.Errorf("input %d: %s, want %q", i, cold[i], want)
		}
	}
	if cold[0] == cold[3] {
		t.Error("the roles gave the same config")
	}
}

func TestMemoBounded(t *testing.T) {
	m := memo[int, int]{max: 3}
	calls := 0
	for i := range 10 {
		if got := m.get(i, func() int { calls++; return i * 2 }); got != i*2 {
			t.Fatalf("get(%d) = %d", i, got)
		}
		if len(m.m) > 3 {
			t.Fatalf("%d entries, max 3", len(m.m))
		}
	}
	m.get(9, func() int { calls++; return 0 })
	if calls != 10 {
		t.Errorf("%d computations for 10 keys and one hit", calls)
	}
}
