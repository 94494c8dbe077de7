package tofu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The state read from the backend is what `tofu show -json` prints of it,
// for every resource of the examples (machines with count indexes, the
// secrets' terraform_data), and reading it starts no tofu process.
func TestStateFromBackendMatchesShow(t *testing.T) {
	r := applyExamples(t)
	ctx := context.Background()
	for _, tenant := range []string{"production", "staging"} {
		dir, creds := r.dirs[tenant], r.creds(tenant)
		s, err := r.runner.open(ctx, dir, creds)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.tf.Show(ctx)
		if err != nil {
			s.close()
			t.Fatal(err)
		}
		runs := r.runner.Runs()
		got, err := s.show(ctx)
		s.close()
		if err != nil {
			t.Fatal(err)
		}
		if n := r.runner.Runs() - runs; n != 0 {
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

// applied is the example tenants applied by a Runner, the way the
// reconciler applies them: a real state backend on loopback, the real
// tofu and the sim provider.
type applied struct {
	srv    *backend.Server
	runner *Runner
	dirs   map[string]string
}

func (a *applied) creds(tenant string) Creds {
	return Creds{Address: a.srv.URL() + "/tfstate/" + tenant}
}

func applyExamples(t *testing.T) *applied {
	t.Helper()
	dir := t.TempDir()
	srv := servertest.StartBackend(t, backend.Config{DataDir: filepath.Join(dir, "data")}, nil)
	cli := filepath.Join(dir, "tofu.rc")
	if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(t)}); err != nil {
		t.Fatal(err)
	}
	runner, err := NewRunner(Options{Binary: testenv.Tofu(t), CLIConfigFile: cli, Env: map[string]string{"REZUSSIM_DIR": filepath.Join(dir, "sim")}})
	if err != nil {
		t.Fatal(err)
	}
	a := &applied{srv: srv, runner: runner, dirs: map[string]string{}}
	desired, err := schema.Load(examples.FS, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, td := range desired.Tenants {
		name := td.Tenant.Metadata.Name
		bundle, err := talos.GenerateSecrets(td.Tenant.Spec.TalosVersion, time.Now(), td.Tenant.Spec.ServiceAccountKey)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := render.Builtin().Render(td, bundle)
		if err != nil {
			t.Fatal(err)
		}
		vars, err := ws.VarFile()
		if err != nil {
			t.Fatal(err)
		}
		work := filepath.Join(dir, "work", name)
		if err := os.MkdirAll(work, 0o700); err != nil {
			t.Fatal(err)
		}
		for f, b := range ws.Files {
			if err := os.WriteFile(filepath.Join(work, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := runner.Apply(context.Background(), work, ws.InitInputs, vars, a.creds(name)); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		a.dirs[name] = work
	}
	return a
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
