package render

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func loadExamples(t *testing.T) *schema.Desired {
	t.Helper()
	d, err := schema.Load(os.DirFS(filepath.Join(testenv.Root(), "examples")), ".", nil)
	if err != nil {
		t.Fatalf("load examples: %v", err)
	}
	return d
}

// TestGolden renders every example tenant and compares the workspace with
// testdata/golden/TENANT.tf.json. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	d := loadExamples(t)
	if len(d.Tenants) < 2 {
		t.Fatalf("examples hold %d tenants, want at least 2", len(d.Tenants))
	}
	for _, td := range d.Tenants {
		ws, err := Builtin().Render(td)
		if err != nil {
			t.Fatalf("render %s: %v", td.Tenant.Metadata.Name, err)
		}
		got := ws.Files[MainFile]
		golden := filepath.Join("testdata", "golden", td.Tenant.Metadata.Name+".tf.json")
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./render -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s:\n%s", MainFile, golden, got)
		}
	}
}

// TestDeterministic renders the same desired state many times, loading it
// afresh each time, and expects byte-identical workspaces.
func TestDeterministic(t *testing.T) {
	first := map[string]string{}
	for i := 0; i < 20; i++ {
		for _, td := range loadExamples(t).Tenants {
			ws, err := Builtin().Render(td)
			if err != nil {
				t.Fatal(err)
			}
			name := td.Tenant.Metadata.Name
			if prev, ok := first[name]; ok && prev != ws.Hash {
				t.Fatalf("render %d of %s gave hash %s, first gave %s", i, name, ws.Hash, prev)
			}
			first[name] = ws.Hash
		}
	}
}

func TestRenderShape(t *testing.T) {
	var prod *schema.TenantDesired
	for _, td := range loadExamples(t).Tenants {
		if td.Tenant.Metadata.Name == "production" {
			prod = td
		}
	}
	if prod == nil {
		t.Fatal("no production tenant in examples")
	}
	ws, err := Builtin().Render(prod)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Terraform struct {
			Backend           map[string]map[string]any `json:"backend"`
			RequiredProviders map[string]map[string]any `json:"required_providers"`
		} `json:"terraform"`
		Resource map[string]map[string]map[string]any `json:"resource"`
	}
	if err := json.Unmarshal(ws.Files[MainFile], &doc); err != nil {
		t.Fatal(err)
	}
	if http, ok := doc.Terraform.Backend["http"]; !ok || len(http) != 0 {
		t.Errorf("backend = %v, want an empty http block (address and credentials come from the environment)", doc.Terraform.Backend)
	}
	if src := doc.Terraform.RequiredProviders["rezussim"]["source"]; src != SimSource {
		t.Errorf("required provider source = %v, want %s", src, SimSource)
	}
	cp := doc.Resource["rezussim_machine"]["ng_controlplane"]
	if cp["count"] != float64(3) || cp["role"] != "controlplane" || cp["shape"] != "medium" || cp["tenant"] != "production" {
		t.Errorf("controlplane resource = %v", cp)
	}
	if !strings.Contains(string(ws.Files[MainFile]), "${count.index}") {
		t.Errorf("names do not use count.index:\n%s", ws.Files[MainFile])
	}
}

func TestSimValidate(t *testing.T) {
	fsys := fstest.MapFS{
		"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
  providerConfig:
    shape: huge
    flavor: x
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: metal
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: metal
`)},
	}
	d, err := schema.Load(fsys, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	probs := Builtin().Validate(d)
	want := []string{
		`t.yaml:22:1: /spec/providerConfig/flavor: sim providerConfig has no field "flavor"`,
		`t.yaml:21:1: /spec/providerConfig/shape: sim providerConfig.shape "huge" is not offered`,
		`t.yaml:33:1: /spec/providerClass: providerClass "metal" has no provider module in this build`,
	}
	if len(probs) != len(want) {
		t.Fatalf("got %d problems, want %d: %v", len(probs), len(want), probs)
	}
	for _, w := range want {
		found := false
		for _, p := range probs {
			if strings.HasPrefix(p.String(), w) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem %q in %v", w, probs)
		}
	}
}
