package schema

import (
	"slices"
	"strings"
	"testing"
)

// encryptedSource is the Source of a document of file whose values at
// encrypted were SOPS-encrypted, each key on its own line from 2.
func encryptedSource(file string, encrypted ...string) Source {
	lines := map[string]int{}
	for i, p := range encrypted {
		lines[p] = i + 2
	}
	s := NewSource(file, 1, lines)
	s.Encrypted = encrypted
	return s
}

const registryPatch = "machine:\n  registries:\n    config:\n      reg.example:\n        auth:\n          password: hunter2-registry\n          username: bob\n"

func TestRedactedPatchText(t *testing.T) {
	p := &ConfigPatch{APIVersion: APIVersion, Kind: KindConfigPatch,
		Metadata: ObjectMeta{Name: "registry", Labels: map[string]string{LabelTenant: "prod"}},
		Spec:     ConfigPatchSpec{TargetRole: RoleWorker, Patch: "machine:\n  sysctls:\n    a.b: \"s3cr3t-sysctl\"\n"},
		Source:   encryptedSource("prod/patch.yaml", "/spec/patch")}
	r := p.Redacted()
	if r.Spec.Patch != EncryptedValue || r.Spec.TargetRole != RoleWorker || r.Metadata.Name != "registry" || r.Tenant() != "prod" {
		t.Fatalf("redacted: %+v", r)
	}
	if !strings.Contains(p.Spec.Patch, "s3cr3t-sysctl") {
		t.Fatal("Redacted changed the object itself")
	}
	if !r.Source.Equal(p.Source) {
		t.Error("the redacted copy lost its Source")
	}
	plain := &ConfigPatch{Spec: ConfigPatchSpec{Patch: "a: b\n"}}
	if plain.Redacted() != plain {
		t.Error("an object without encrypted values is copied")
	}
}

func TestRedactedInsideMappingPatch(t *testing.T) {
	tn := &Tenant{APIVersion: APIVersion, Kind: KindTenant, Metadata: ObjectMeta{Name: "prod"},
		Spec: TenantSpec{
			KubernetesVersion: "1.33.1",
			ConfigPatches:     []NamedPatch{{Name: "registry", Patch: registryPatch}, {Name: "plain", Patch: "machine:\n  env:\n    A: b\n"}},
			Plugins:           Plugins{CNI: &CNIPlugin{Type: "cilium", Values: map[string]any{"encryption": map[string]any{"key": "wg-k3y-value", "port": 51871.0}, "debug": true}}},
		},
		Source: encryptedSource("prod/tenant.yaml",
			"/spec/configPatches/0/patch/machine/registries/config/reg.example/auth/password",
			"/spec/plugins/cni/values/encryption"),
	}
	r := tn.Redacted()
	got := r.Spec.ConfigPatches[0].Patch
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "password: <encrypted>") || !strings.Contains(got, "username: bob") {
		t.Errorf("redacted patch text:\n%s", got)
	}
	if r.Spec.ConfigPatches[1].Patch != tn.Spec.ConfigPatches[1].Patch {
		t.Errorf("a patch without encrypted values changed: %q", r.Spec.ConfigPatches[1].Patch)
	}
	enc := r.Spec.Plugins.CNI.Values["encryption"].(map[string]any)
	if enc["key"] != EncryptedValue || enc["port"] != EncryptedValue || r.Spec.Plugins.CNI.Values["debug"] != true {
		t.Errorf("redacted CNI values: %v", r.Spec.Plugins.CNI.Values)
	}
	if r.Spec.KubernetesVersion != "1.33.1" || r.Metadata.Name != "prod" {
		t.Errorf("plain fields changed: %+v", r.Spec)
	}
	if tn.Spec.Plugins.CNI.Values["encryption"].(map[string]any)["key"] != "wg-k3y-value" {
		t.Error("Redacted changed the object itself")
	}
}

// A pointer that leads nowhere inside a patch's text, or into text of
// several documents, hides the whole text.
func TestRedactedWholeTextWhenUnsure(t *testing.T) {
	for name, text := range map[string]string{
		"unknown key":   registryPatch,
		"several docs":  "machine:\n  a: secret-one\n---\nmachine:\n  b: secret-two\n",
		"not a mapping": "- op: add\n  path: /machine/x\n  value: secret-op\n",
	} {
		p := &ConfigPatch{Spec: ConfigPatchSpec{Patch: text}, Source: encryptedSource("p.yaml", "/spec/patch/machine/nothing/here")}
		if got := p.Redacted().Spec.Patch; got != EncryptedValue {
			t.Errorf("%s: %q", name, got)
		}
	}
}

// An encrypted value in a field that cannot read <encrypted> leaves only
// the object's identity, and CheckEncrypted names it.
func TestRedactedFailsClosed(t *testing.T) {
	ng := &NodeGroup{APIVersion: APIVersion, Kind: KindNodeGroup, Metadata: ObjectMeta{Name: "workers", Labels: map[string]string{LabelTenant: "prod"}},
		Spec:   NodeGroupSpec{Count: 7, ProviderClass: ProviderSim, ProviderConfig: map[string]any{"token": "cloud-t0ken"}},
		Source: encryptedSource("prod/ng.yaml", "/spec/count", "/spec/providerConfig/token")}
	r := ng.Redacted()
	if r.Spec.Count != 0 || r.Spec.ProviderConfig != nil || r.Metadata.Name != "workers" {
		t.Errorf("redacted: %+v", r)
	}
	d := &Desired{Tenants: []*TenantDesired{{
		Tenant:     &Tenant{Metadata: ObjectMeta{Name: "prod"}, Source: encryptedSource("prod/tenant.yaml", "/metadata/name", "/spec/plugins/cni/values/x", "/spec/configPatches/2/patch/a")},
		NodeGroups: []*NodeGroup{ng},
		Patches:    []*ConfigPatch{{Source: encryptedSource("prod/p.yaml", "/spec/patch", "/spec/targetRole")}},
	}}}
	var got []string
	for _, p := range CheckEncrypted(d) {
		if !strings.Contains(p.Message, "only patches") {
			t.Errorf("message: %s", p.Message)
		}
		got = append(got, p.File+":"+p.Path)
		if p.Line < 2 {
			t.Errorf("%s: line %d, want the value's", p.Path, p.Line)
		}
	}
	want := []string{"prod/tenant.yaml:/metadata/name", "prod/ng.yaml:/spec/count", "prod/ng.yaml:/spec/providerConfig/token", "prod/p.yaml:/spec/targetRole"}
	if !slices.Equal(got, want) {
		t.Errorf("problems at %v, want %v", got, want)
	}
}

func TestTenantDesiredRedacted(t *testing.T) {
	plainNG := &NodeGroup{Metadata: ObjectMeta{Name: "cp"}}
	secret := &ConfigPatch{Metadata: ObjectMeta{Name: "s"}, Spec: ConfigPatchSpec{Patch: "machine:\n  token: abcd-efgh ijkl\n"}, Source: encryptedSource("p.yaml", "/spec/patch")}
	td := &TenantDesired{Tenant: &Tenant{Metadata: ObjectMeta{Name: "prod"}}, NodeGroups: []*NodeGroup{plainNG}, Patches: []*ConfigPatch{secret}}
	if !td.Encrypted() {
		t.Fatal("Encrypted: false")
	}
	r := td.Redacted()
	if r == td || r.Tenant != td.Tenant || r.NodeGroups[0] != plainNG || r.Patches[0].Spec.Patch != EncryptedValue || td.Patches[0] != secret {
		t.Errorf("redacted: %+v", r)
	}
	vals := td.EncryptedValues()
	for _, want := range []string{secret.Spec.Patch, "abcd-efgh ijkl", "abcd-efgh", "ijkl"} {
		if !slices.Contains(vals, want) {
			t.Errorf("EncryptedValues lacks %q: %q", want, vals)
		}
	}
	if slices.Contains(vals, "token") || slices.Contains(vals, "machine") {
		t.Errorf("EncryptedValues holds the keys of the patch: %q", vals)
	}
	broken := &ConfigPatch{Spec: ConfigPatchSpec{Patch: "a: [b\nc: d e\n"}, Source: encryptedSource("p.yaml", "/spec/patch")}
	vals = (&TenantDesired{Tenant: td.Tenant, Patches: []*ConfigPatch{broken}}).EncryptedValues()
	for _, want := range []string{"a: [b", "c: d e", "d"} {
		if !slices.Contains(vals, want) {
			t.Errorf("EncryptedValues of text that is no YAML lacks %q: %q", want, vals)
		}
	}
	plain := &TenantDesired{Tenant: td.Tenant, NodeGroups: td.NodeGroups}
	if plain.Encrypted() || plain.Redacted() != plain || plain.EncryptedValues() != nil {
		t.Error("a tenant without encrypted values is redacted")
	}
}

// BenchmarkRedacted: the redacted copy of a tenant with one ConfigPatch
// encrypted as a whole and one encrypted value by value, as every run of
// such a tenant and every preview of it makes.
func BenchmarkRedacted(b *testing.B) {
	td := &TenantDesired{
		Tenant: &Tenant{Metadata: ObjectMeta{Name: "prod"}, Spec: TenantSpec{KubernetesVersion: "1.33.1",
			ConfigPatches: []NamedPatch{{Name: "registry", Patch: registryPatch}}},
			Source: encryptedSource("prod/tenant.yaml", "/spec/configPatches/0/patch/machine/registries/config/reg.example/auth/password")},
		NodeGroups: []*NodeGroup{{Metadata: ObjectMeta{Name: "workers"}, Spec: NodeGroupSpec{Count: 3, ProviderClass: ProviderSim}}},
		Patches: []*ConfigPatch{{Metadata: ObjectMeta{Name: "s"}, Spec: ConfigPatchSpec{Patch: registryPatch},
			Source: encryptedSource("prod/p.yaml", "/spec/patch")}},
	}
	for b.Loop() {
		if r := td.Redacted(); r.Patches[0].Spec.Patch != EncryptedValue {
			b.Fatal("not redacted")
		}
	}
}
