package reconciler

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/schema"
)

// The state read from the backend is what `tofu show -json` prints of it,
// for every resource of the examples (machines with count indexes, the
// secrets' terraform_data), and reading it starts no tofu process.
func TestStateFromBackendMatchesShow(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	ctx := context.Background()
	for _, tenant := range []string{"production", "staging"} {
		dir := filepath.Join(r.rec.opts.DataDir, "work", tenant)
		creds, revoke := r.rec.creds(tenant)
		s, err := r.rec.runner.open(ctx, dir, creds)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.tf.Show(ctx)
		if err != nil {
			s.close()
			t.Fatal(err)
		}
		runs := r.rec.runner.Runs()
		got, err := s.show(ctx)
		s.close()
		revoke()
		if err != nil {
			t.Fatal(err)
		}
		if n := r.rec.runner.Runs() - runs; n != 0 {
			t.Errorf("%s: reading the plain state started %d tofu processes", tenant, n)
		}
		if want.Values == nil || len(want.Values.RootModule.Resources) < 3 {
			t.Fatalf("%s: tofu show has no resources: %+v", tenant, want.Values)
		}
		opts := cmp.Options{
			cmpopts.IgnoreFields(tfjson.StateResource{}, "SensitiveValues"),
			cmpopts.IgnoreFields(tfjson.State{}, "FormatVersion", "TerraformVersion", "Checks"),
			cmpopts.IgnoreUnexported(tfjson.State{}),
		}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("%s: state from the backend differs from tofu show (-show +backend):\n%s", tenant, diff)
		}
	}
}

func TestStateFromFile(t *testing.T) {
	st, ok := stateFromFile(nil)
	if !ok || st.Values != nil {
		t.Fatalf("no state: %+v, %v; want an empty state", st, ok)
	}
	for _, raw := range []string{
		`{"serial":3,"lineage":"x","meta":{"key_provider.pbkdf2.k":"e30="},"encrypted_data":"AAAA","encryption_version":"v0"}`,
		`{"version":3,"resources":[]}`,
		`not json`,
	} {
		if _, ok := stateFromFile([]byte(raw)); ok {
			t.Errorf("stateFromFile(%.40s) ok; only tofu can read it", raw)
		}
	}
	st, ok = stateFromFile([]byte(`{"version":4,"terraform_version":"1.10.10","outputs":{"ip":{"value":"10.0.0.1","type":"string"}},
	"resources":[
	 {"mode":"managed","type":"a_b","name":"x","provider":"provider[\"example.com/ns/a\"]","instances":[{"index_key":"k1","status":"tainted","attributes":{"id":"1"}}]},
	 {"module":"module.m","mode":"data","type":"a_c","name":"y","provider":"provider[\"example.com/ns/a\"]","instances":[{"attributes":{"id":"2"}},{"deposed":"00aa","attributes":{"id":"3"}}]}
	]}`))
	if !ok {
		t.Fatal("a plain version 4 state was not read")
	}
	root := st.Values.RootModule
	if len(root.Resources) != 1 || len(root.ChildModules) != 1 || len(root.ChildModules[0].Resources) != 2 {
		t.Fatalf("modules: %+v", st.Values)
	}
	x := root.Resources[0]
	if x.Address != `a_b.x["k1"]` || !x.Tainted || x.ProviderName != "example.com/ns/a" || x.Index != "k1" || x.AttributeValues["id"] != "1" {
		t.Errorf("resource x: %+v", x)
	}
	m := root.ChildModules[0]
	if m.Address != "module.m" || m.Resources[0].Address != "module.m.data.a_c.y" || m.Resources[0].Mode != tfjson.DataResourceMode || m.Resources[1].DeposedKey != "00aa" {
		t.Errorf("module m: %+v %+v", m.Resources[0], m.Resources[1])
	}
	if o := st.Values.Outputs["ip"]; o == nil || o.Value != "10.0.0.1" || o.Type.FriendlyName() != "string" {
		t.Errorf("output ip: %+v", o)
	}
}

func TestPlanLine(t *testing.T) {
	for _, c := range []struct {
		out  string
		want schema.PlanSummary
		ok   bool
	}{
		{"\nOpenTofu will perform the following actions:\n\nPlan: 1 to add, 2 to change, 3 to destroy.\n", schema.PlanSummary{Add: 1, Change: 2, Destroy: 3}, true},
		{"Plan: 2 to import, 1 to add, 0 to change, 1 to destroy.\n", schema.PlanSummary{Add: 1, Change: 0, Destroy: 1}, true},
		{"Plan: 0 to add, 0 to change, 4 to destroy, 1 to forget.\r\n", schema.PlanSummary{Add: 0, Change: 0, Destroy: 4}, true},
		{"  # x.y will be created\n  + name = \"Plan: 9 to add, 9 to change, 9 to destroy.\"\n", schema.PlanSummary{}, false},
		{"Changes to Outputs:\n  + ip = \"10.0.0.1\"\n", schema.PlanSummary{}, false},
	} {
		for _, size := range []int{1, 7, len(c.out)} {
			p := &planLine{}
			for rest := c.out; rest != ""; {
				n := min(size, len(rest))
				p.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			got, ok := p.summary()
			if got != c.want || ok != c.ok {
				t.Errorf("%q in writes of %d: %+v %v, want %+v %v", strings.TrimSpace(c.out), size, got, ok, c.want, c.ok)
			}
		}
	}
}
