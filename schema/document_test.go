package schema

import (
	"strings"
	"testing"
	"testing/fstest"
)

// The checks across documents report at a document's name and tenant
// label, at the line and column where each is written, also when the
// documents come from the cache; the documents keep no other positions.
func TestCrossDocumentProblemsKeepPositions(t *testing.T) {
	tenant := "apiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  kubernetesVersion: \"1.34.1\"\n  talosVersion: \"1.12.6\"\n  controlPlaneEndpoint: https://acme.example.internal:6443\n"
	group := func(name, labels string) string {
		return "apiVersion: rezuscloud.io/v1\nkind: NodeGroup\nmetadata:\n  labels: " + labels + "\n  name:   " + name + "\nspec:\n  count: 1\n  providerClass: sim\n  providerConfig: {shape: small}\n"
	}
	fsys := fstest.MapFS{
		"a.yaml":        {Data: []byte(tenant)},
		"b/acme.yaml":   {Data: []byte("# the same tenant again\n" + tenant)},
		"groups.yaml":   {Data: []byte(group("workers", "{rezuscloud.io/tenant: acme, rezuscloud.io/role: worker}") + "---\n" + group("workers", "{rezuscloud.io/role: worker, rezuscloud.io/tenant: acme}"))},
		"orphan.yaml":   {Data: []byte(group("gpu", "{rezuscloud.io/role: worker,   rezuscloud.io/tenant: acmee}"))},
		"nolabels.yaml": {Data: []byte(strings.Replace(group("edge", "{rezuscloud.io/role: worker}"), "  labels: {rezuscloud.io/role: worker}\n", "", 1))},
	}
	want := []string{
		`b/acme.yaml:5:3: /metadata/name: tenant "acme" is declared twice: first at a.yaml:4`,
		`groups.yaml:15:3: /metadata/name: node group "workers" of tenant "acme" is declared twice: first at groups.yaml:5`,
		`nolabels.yaml:`,
		`orphan.yaml:4:42: /metadata/labels/rezuscloud.io~1tenant: tenant "acmee" is not declared by any Tenant manifest`,
	}
	cache := NewCache(0)
	for round := range 2 {
		probs := cachedProblems(t, fsys, cache)
		if len(probs) != len(want) {
			t.Fatalf("round %d: %d problems, want %d:\n%v", round, len(probs), len(want), probs)
		}
		for i, p := range probs {
			if !strings.HasPrefix(p.String(), want[i]) {
				t.Errorf("round %d: %s\nwant %s…", round, p, want[i])
			}
		}
	}
	cache.mu.Lock()
	defer cache.mu.Unlock()
	for k, e := range cache.entries {
		for _, d := range e.result.docs {
			if len(d.pos) > len(crossPaths) {
				t.Errorf("%s keeps %d positions, want at most %d", k.path, len(d.pos), len(crossPaths))
			}
		}
	}
}
