package schema

import "testing"

func TestTenantOf(t *testing.T) {
	labelled := ObjectMeta{Name: "x", Labels: map[string]string{LabelTenant: "alpha"}}
	for _, tc := range []struct {
		kind string
		m    ObjectMeta
		want string
	}{
		{KindTenant, ObjectMeta{Name: "alpha", Labels: map[string]string{LabelTenant: "beta"}}, "alpha"},
		{KindNodeGroup, labelled, "alpha"},
		{KindConfigPatch, labelled, "alpha"},
		{KindMachine, labelled, "alpha"},
		{KindMachine, ObjectMeta{Name: "x"}, ""},
		{KindProvider, labelled, ""},
		{KindCommit, labelled, ""},
		{"AppliedTenant", labelled, ""},
	} {
		if got := TenantOf(tc.kind, &tc.m); got != tc.want {
			t.Errorf("TenantOf(%s, %+v) = %q, want %q", tc.kind, tc.m, got, tc.want)
		}
	}
}

func TestKinds(t *testing.T) {
	for _, k := range Kinds() {
		obj := k.New()
		if obj.Meta() == nil || k.Word == "" {
			t.Errorf("kind %s: New gives %T with no metadata, or no word", k.Kind, obj)
		}
		if got, ok := LookupKind(k.Kind); !ok || got.Kind != k.Kind {
			t.Errorf("LookupKind(%s) = %+v, %v", k.Kind, got, ok)
		}
	}
	if _, ok := LookupKind("AppliedTenant"); ok {
		t.Error("an internal kind is served")
	}
	if got := CommitName("sha256:ab"); got != "sha256-ab" {
		t.Errorf("CommitName = %q", got)
	}
	if got := PreviewCommitName("sha256:ab"); got != "preview-sha256-ab" {
		t.Errorf("PreviewCommitName = %q", got)
	}
}
