package schema

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

// TestSchemaFiles checks that the embedded schemas are the files in the
// repository, and that the definitions they share are the same in each.
func TestSchemaFiles(t *testing.T) {
	names, err := fs.Glob(Files(), "*.json")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"configpatch.schema.json", "nodegroup.schema.json", "tenant.schema.json"}
	if !slices.Equal(names, want) {
		t.Fatalf("Files() holds %v, want %v", names, want)
	}
	shared := map[string]any{}
	for _, name := range names {
		embedded, err := fs.ReadFile(Files(), name)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(embedded, onDisk) {
			t.Errorf("%s: embedded copy differs from the file", name)
		}
		var s struct {
			Schema string         `json:"$schema"`
			Defs   map[string]any `json:"$defs"`
		}
		if err := json.Unmarshal(onDisk, &s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %q", name, s.Schema)
		}
		for _, def := range []string{"dnsLabel", "version", "stringMap", "patch", "namedPatch"} {
			if prev, ok := shared[def]; ok {
				if diff := cmp.Diff(prev, s.Defs[def]); diff != "" {
					t.Errorf("%s: $defs/%s differs from the other schemas:\n%s", name, def, diff)
				}
			} else {
				shared[def] = s.Defs[def]
			}
		}
	}
	for kind, file := range schemaFiles {
		if SchemaFile(kind) != file {
			t.Errorf("SchemaFile(%s) = %q", kind, SchemaFile(kind))
		}
	}
	if SchemaFile(KindMachine) != "" {
		t.Error("Machine has no manifest schema")
	}
}

// TestSchemaPatternsExplained: every pattern in the schemas has a message in
// words, and every property has a description, for editors' hover.
func TestSchemaPatternsExplained(t *testing.T) {
	pattern := regexp.MustCompile(`"pattern":\s*"((?:[^"\\]|\\.)*)"`)
	for name := range schemaFiles {
		data, _ := fs.ReadFile(Files(), SchemaFile(name))
		for _, m := range pattern.FindAllSubmatch(data, -1) {
			var p string
			if err := json.Unmarshal([]byte(`"`+string(m[1])+`"`), &p); err != nil {
				t.Fatal(err)
			}
			if _, ok := patternMeanings[p]; !ok {
				t.Errorf("%s: pattern %s has no entry in patternMeanings", SchemaFile(name), p)
			}
		}
		var root map[string]any
		if err := json.Unmarshal(data, &root); err != nil {
			t.Fatal(err)
		}
		var walk func(path string, v any)
		walk = func(path string, v any) {
			m, ok := v.(map[string]any)
			if !ok {
				return
			}
			if props, ok := m["properties"].(map[string]any); ok {
				for k, p := range props {
					pm, _ := p.(map[string]any)
					_, hasDesc := pm["description"]
					_, hasRef := pm["$ref"]
					if !hasDesc && !hasRef {
						t.Errorf("%s: %s/%s has no description", SchemaFile(name), path, k)
					}
					walk(path+"/"+k, p)
				}
			}
			for _, k := range []string{"items", "additionalProperties"} {
				walk(path+"/"+k, m[k])
			}
		}
		walk("", root)
		for k, def := range root["$defs"].(map[string]any) {
			walk("$defs/"+k, def)
		}
	}
}

// TestSchemaExamplesLoad: the examples the schemas show in editors are valid
// manifests.
func TestSchemaExamplesLoad(t *testing.T) {
	fsys := fstest.MapFS{}
	for kind, file := range schemaFiles {
		data, _ := fs.ReadFile(Files(), file)
		var s struct {
			Examples []any `json:"examples"`
		}
		if err := json.Unmarshal(data, &s); err != nil || len(s.Examples) == 0 {
			t.Fatalf("%s: no examples (%v)", file, err)
		}
		// JSON is YAML.
		out, _ := json.Marshal(s.Examples[0])
		fsys[kind+".yaml"] = &fstest.MapFile{Data: out}
	}
	d, err := Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tenants) != 1 || len(d.Tenants[0].NodeGroups) != 1 || len(d.Tenants[0].Patches) != 1 {
		t.Errorf("schema examples do not form one tenant with a node group and a patch")
	}
}

// TestKindsJSON checks the JSON form of the API-only kinds and that zero
// status and times stay out of it.
func TestKindsJSON(t *testing.T) {
	m := Machine{APIVersion: APIVersion, Kind: KindMachine, Metadata: ObjectMeta{Name: "prod-workers-0"},
		Spec:   MachineSpec{ManagementAddress: "127.1.0.10", ProviderID: "sim://prod/0", Shape: "small", Hostname: "prod-workers-0", Role: RoleWorker, Tenant: "prod", NodeGroup: "workers"},
		Status: MachineStatus{Stage: StageReady, Ready: true}}
	got, _ := json.Marshal(m)
	want := `{"apiVersion":"rezuscloud.io/v1","kind":"Machine","metadata":{"name":"prod-workers-0"},"spec":{"managementAddress":"127.1.0.10","providerID":"sim://prod/0","shape":"small","hostname":"prod-workers-0","role":"worker","tenant":"prod","nodeGroup":"workers"},"status":{"stage":"ready","ready":true}}`
	if string(got) != want {
		t.Errorf("Machine JSON\n got %s\nwant %s", got, want)
	}
	c := Commit{APIVersion: APIVersion, Kind: KindCommit, Metadata: ObjectMeta{Name: "abc123"},
		Spec: CommitSpec{SHA: "abc123", Ref: "refs/heads/main"},
		Status: CommitStatus{Phase: CommitPartiallyFailed, Tenants: []TenantResult{{Tenant: "prod", Phase: CommitFailed, Plan: PlanSummary{Add: 1}, Error: "boom"}},
			Problems: []Problem{{File: "a.yaml", Line: 1, Message: "x"}}}}
	got, _ = json.Marshal(c)
	want = `{"apiVersion":"rezuscloud.io/v1","kind":"Commit","metadata":{"name":"abc123"},"spec":{"sha":"abc123","ref":"refs/heads/main","preview":false},"status":{"phase":"PartiallyFailed","tenants":[{"tenant":"prod","phase":"Failed","plan":{"add":1,"change":0,"destroy":0},"error":"boom"}],"problems":[{"file":"a.yaml","line":1,"column":0,"path":"","message":"x"}],"nonFastForward":false}}`
	if string(got) != want {
		t.Errorf("Commit JSON\n got %s\nwant %s", got, want)
	}
	if !CommitPartiallyFailed.Done() || CommitApplying.Done() {
		t.Error("CommitPhase.Done")
	}
	p := Provider{APIVersion: APIVersion, Kind: KindProvider, Metadata: ObjectMeta{Name: "sim"},
		Spec: ProviderSpec{Class: ProviderSim, Source: "registry.opentofu.org/rezuscloud/rezussim", Builtin: true, Mappings: []TypeMapping{{TFType: "rezussim_machine", Kind: KindMachine}}}}
	got, _ = json.Marshal(p)
	want = `{"apiVersion":"rezuscloud.io/v1","kind":"Provider","metadata":{"name":"sim"},"spec":{"class":"sim","source":"registry.opentofu.org/rezuscloud/rezussim","builtin":true,"mappings":[{"tfType":"rezussim_machine","kind":"Machine"}]}}`
	if string(got) != want {
		t.Errorf("Provider JSON\n got %s\nwant %s", got, want)
	}
}
