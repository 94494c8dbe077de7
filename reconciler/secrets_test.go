package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

// formerWorkspace is staging's workspace as earlier versions rendered it
// from examples/staging: the secrets bundle in the input of
// terraform_data.talos_secrets, whose output tofu printed in plain text.
const formerWorkspace = "testdata/staging-former-secrets.tf.json"

// stagingOnly is the example repository without production.
func stagingOnly(t *testing.T) fstest.MapFS {
	t.Helper()
	repo := examples(t)
	maps.DeleteFunc(repo, func(name string, _ *fstest.MapFile) bool { return strings.HasPrefix(name, "production/") })
	return repo
}

// applyFormer applies staging's workspace as an earlier version did, with a
// bundle of its own, and returns the bundle and the workspace's init
// inputs.
func (r *rig) applyFormer(t *testing.T, repo fstest.MapFS) (bundle, initInputs []byte) {
	t.Helper()
	desired, err := schema.Load(repo, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	td := desired.Tenant("staging")
	bundle, err = talos.GenerateSecrets(td.Tenant.Spec.TalosVersion, r.rec.opts.Now(), td.Tenant.Spec.ServiceAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := render.Builtin().Render(td, bundle)
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile(formerWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := r.rec.workDir("staging")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, render.MainFile), main, 0o600); err != nil {
		t.Fatal(err)
	}
	vars, err := ws.VarFile()
	if err != nil {
		t.Fatal(err)
	}
	creds, revoke := r.rec.creds("staging")
	defer revoke()
	res, err := r.rec.Runner().Apply(context.Background(), dir, ws.InitInputs, vars, creds)
	if err != nil {
		t.Fatalf("apply of the former workspace: %v\n%s", err, res.Output)
	}
	return bundle, ws.InitInputs
}

// simIDs lists the ids of a tenant's machines in the sim cloud.
func (r *rig) simIDs(tenant string) map[string]bool {
	r.t.Helper()
	st, err := sim.Open(r.simDir)
	if err != nil {
		r.t.Fatal(err)
	}
	list, err := st.List()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range list {
		if m.Tenant == tenant {
			out[m.ID] = true
		}
	}
	return out
}

// stateResources lists the resources of a tenant's state by address, with
// the attributes of each, decrypting it through tofu when it is encrypted.
func (r *rig) stateResources(t *testing.T, tenant string) map[string]map[string]any {
	t.Helper()
	dir, err := r.rec.workDir(tenant)
	if err != nil {
		t.Fatal(err)
	}
	init, err := os.ReadFile(filepath.Join(dir, render.MainFile))
	if err != nil {
		t.Fatal(err)
	}
	creds, revoke := r.rec.creds(tenant)
	defer revoke()
	st, err := r.rec.Runner().State(context.Background(), dir, init, creds)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	if st.Values != nil && st.Values.RootModule != nil {
		for _, res := range st.Values.RootModule.Resources {
			out[res.Address] = res.AttributeValues
		}
	}
	return out
}

// TestFormerSecretsStateCarriedOver: a tenant whose state an earlier
// version wrote (formerWorkspace) keeps its bundle and every machine
// through the first run of this version, which moves the bundle into
// render.SecretsResource and has tofu forget the former resource, without
// destroying or replacing anything; the run's output shows nothing of the
// bundle, and a later destroy does not print the former resource at all.
// With plain and with encrypted states.
func TestFormerSecretsStateCarriedOver(t *testing.T) {
	forStates(t, func(t *testing.T, r *rig, encrypted bool) {
		repo := stagingOnly(t)
		bundle, _ := r.applyFormer(t, repo)
		former := r.stateResources(t, "staging")
		if former[render.FormerSecretsResource]["output"] != string(bundle) || former[render.SecretsResource] != nil {
			t.Fatalf("the former workspace's state does not keep the bundle as earlier versions did: %v", addresses(former))
		}
		if encrypted != strings.Contains(r.rawState("staging"), "encrypted_data") {
			t.Fatalf("the state is not as the test means it (encrypted: %v)", encrypted)
		}
		machines := r.simIDs("staging")
		if len(machines) != 2 {
			t.Fatalf("the former workspace made %d machines, want 2", len(machines))
		}

		c := r.reconcile("rev1", "first run of this version", repo)
		mustSucceed(t, c)
		res := c.Status.Tenants[0]
		if res.Plan != (schema.PlanSummary{Add: 1}) {
			t.Errorf("the first run planned %s, want only the new secrets resource added", res.Plan)
		}
		if got := r.simIDs("staging"); !maps.Equal(got, machines) {
			t.Errorf("machines %v after the run, were %v", addresses(got), addresses(machines))
		}
		after := r.stateResources(t, "staging")
		if _, has := after[render.FormerSecretsResource]; has {
			t.Errorf("the state still holds %s", render.FormerSecretsResource)
		}
		if got := after[render.SecretsResource][render.SecretsAttribute]; got != string(bundle) {
			t.Fatalf("%s.%s holds %d bytes, not the bundle", render.SecretsResource, render.SecretsAttribute, len(str(got)))
		}
		if out := after[render.SecretsResource]["output"]; out != nil {
			t.Errorf("%s has an output of %d bytes, want none", render.SecretsResource, len(str(out)))
		}
		if got := r.rec.TalosBundle("staging"); string(got) != string(bundle) {
			t.Error("the reconciler reads another bundle back")
		}
		checkNoBundle(t, "the first run's output", res.OutputTail, bundle)
		creds, revoke := r.rec.creds("staging")
		revoke()
		if known := strings.Join(creds.Secrets, "\n"); !strings.Contains(known, yamlValue(t, bundle, "secretboxencryptionsecret")) {
			t.Error("the tenant's runs do not know the values of its bundle")
		}

		// A run with nothing to change plans nothing: the removed block
		// of a resource the state no longer has is quiet.
		scaled := stagingOnly(t)
		f := "staging/nodegroups.yaml"
		scaled[f].Data = []byte(strings.Replace(string(scaled[f].Data), "count: 1", "count: 2", 1))
		c = r.reconcile("rev2", "scale", scaled)
		mustSucceed(t, c)
		if p := c.Status.Tenants[0].Plan; p != (schema.PlanSummary{Add: 1, Machines: schema.PlanCounts{Add: 1}}) {
			t.Errorf("scaling planned %s, want one machine added", p.Text())
		}

		snap := sources.Snapshot{Revision: "rev3", Ref: "refs/heads/main", FS: fstest.MapFS{"README.md": {Data: []byte("none")}}, Root: "."}
		snap.SetMessage("Remove staging\n\n" + TrailerAllowDeletions + ": 1\n")
		c, err := r.rec.Reconcile(context.Background(), snap)
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, c)
		tail := c.Status.Tenants[0].OutputTail
		if !strings.Contains(tail, "# "+render.SecretsResource+" will be destroyed") || !strings.Contains(tail, render.SecretsAttribute+" = (sensitive value)") {
			t.Errorf("the destroy does not show the secrets resource as sensitive:\n%s", tail)
		}
		if strings.Contains(tail, "talos_secrets\" {") || strings.Contains(tail, "EOT") {
			t.Errorf("the destroy prints the former resource or a heredoc value:\n%s", tail)
		}
		checkNoBundle(t, "the destroy's output", tail, bundle)
	})
}

// forStates runs test on a rig whose states are plain, and on one whose
// states are encrypted.
func forStates(t *testing.T, test func(t *testing.T, r *rig, encrypted bool)) {
	for _, encrypted := range []bool{false, true} {
		name := "plain"
		if encrypted {
			name = "encrypted"
		}
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			if encrypted {
				const passphrase = "correct-horse-battery-staple"
				enc, err := tofu.EncryptionConfig(passphrase, false)
				if err != nil {
					t.Fatal(err)
				}
				r.rec.opts.StatePassphrase = passphrase
				r.restartWith(t, map[string]string{"TF_ENCRYPTION": enc}, true)
			}
			test(t, r, encrypted)
		})
	}
}

// TestFormerSecretsStateDestroyed: a tenant that an earlier version
// applied (formerWorkspace) and that leaves git before this version runs
// it is destroyed without the former secrets resource in the plan, which
// would print the bundle: its machines go, the bundle stays in the state
// while they do, and the state goes with the tenant. With plain and with
// encrypted states.
func TestFormerSecretsStateDestroyed(t *testing.T) {
	forStates(t, func(t *testing.T, r *rig, encrypted bool) {
		bundle, initInputs := r.applyFormer(t, stagingOnly(t))
		if encrypted != strings.Contains(r.rawState("staging"), "encrypted_data") {
			t.Fatalf("the state is not as the test means it (encrypted: %v)", encrypted)
		}
		rec := &appliedRecord{Tenant: "staging", Revision: "rev0", InitInputs: initInputs}
		if err := r.srv.Store().Update(func(tx store.Tx) error {
			_, err := tx.Put(kindApplied, "staging", mustJSON(rec))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		snap := sources.Snapshot{Revision: "rev1", Ref: "refs/heads/main", FS: fstest.MapFS{"README.md": {Data: []byte("none")}}, Root: "."}
		snap.SetMessage("Remove staging\n\n" + TrailerAllowDeletions + ": 1\n")
		c, err := r.rec.Reconcile(context.Background(), snap)
		if err != nil {
			t.Fatal(err)
		}
		mustSucceed(t, c)
		res := c.Status.Tenants[0]
		if res.Plan != (schema.PlanSummary{Destroy: 2, Machines: schema.PlanCounts{Destroy: 2}}) {
			t.Errorf("the destroy planned %s, want the two machines destroyed", res.Plan.Text())
		}
		if strings.Contains(res.OutputTail, "talos_secrets\" {") || strings.Contains(res.OutputTail, "EOT") {
			t.Errorf("the destroy prints the former resource or a heredoc value:\n%s", res.OutputTail)
		}
		checkNoBundle(t, "the destroy's output", res.OutputTail, bundle)
		if n := len(r.simIDs("staging")); n != 0 {
			t.Errorf("%d machines left", n)
		}
		if st := r.rawState("staging"); st != "" {
			t.Errorf("the state of the destroyed tenant stays (%d bytes)", len(st))
		}
	})
}

// checkNoBundle fails the test when text holds a line of the bundle's
// values, without printing it.
func checkNoBundle(t *testing.T, what, text string, bundle []byte) {
	t.Helper()
	for _, l := range strings.Split(string(bundle), "\n") {
		_, v, ok := strings.Cut(l, ": ")
		if ok && len(v) >= 16 && strings.Contains(text, v) {
			t.Errorf("%s holds a value of the bundle (%s)", what, strings.TrimSpace(strings.SplitN(l, ":", 2)[0]))
		}
	}
}

// yamlValue returns the value of key in the YAML of a bundle.
func yamlValue(t *testing.T, bundle []byte, key string) string {
	t.Helper()
	for _, l := range strings.Split(string(bundle), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && k == key {
			return v
		}
	}
	t.Fatalf("the bundle has no %s", key)
	return ""
}

func addresses[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func str(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestServiceAccountKeyAsAsked: a tenant that asks for an ECDSA
// service-account key gets its bundle made with one. A later commit that
// asks for RSA fails the tenant's run, before tofu, with a message that
// names both kinds, in the server that made the bundle and in a new one
// that reads it from the state; nothing is applied and no machine goes.
// Leaving the field out applies again.
func TestServiceAccountKeyAsAsked(t *testing.T) {
	r := newRig(t)
	repo := stagingOnly(t)
	tenant := string(repo["staging/tenant.yaml"].Data)
	ask := func(key string) {
		doc := tenant
		if key != "" {
			doc = strings.Replace(tenant, "spec:\n", "spec:\n  serviceAccountKey: "+key+"\n", 1)
		}
		repo["staging/tenant.yaml"] = &fstest.MapFile{Data: []byte(doc), Mode: 0o644}
	}

	ask(schema.ServiceAccountKeyECDSA)
	if c := r.reconcile("r1", "staging with an ECDSA key", repo); c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("first apply: %s %s", c.Status.Phase, c.Status.Message)
	}
	bundle, _, err := secretsFromStateFile([]byte(r.rawState("staging")))
	if err != nil {
		t.Fatal(err)
	}
	if kind, err := talos.ServiceAccountKeyOf(bundle); err != nil || kind != schema.ServiceAccountKeyECDSA {
		t.Fatalf("the stored bundle's service-account key: %q, %v; want ecdsa", kind, err)
	}
	machines := r.simIDs("staging")

	ask(schema.ServiceAccountKeyRSA)
	for i, restart := range []bool{false, true} {
		if restart {
			r.restartWith(t, nil, false)
		}
		c := r.reconcile(fmt.Sprintf("r%d", 2+i), "staging asks for an RSA key", repo)
		tr := resultOf(t, c, "staging")
		want := "spec.serviceAccountKey is rsa, but the cluster's service-account key is ecdsa"
		if tr.Phase != schema.CommitFailed || !strings.Contains(tr.Error, want) {
			t.Errorf("restarted %v: staging's result %s %q, want Failed saying %q", restart, tr.Phase, tr.Error, want)
		}
		if tr.Plan.Add+tr.Plan.Change+tr.Plan.Destroy != 0 {
			t.Errorf("restarted %v: the refused run planned %+v", restart, tr.Plan)
		}
	}
	if got := r.simIDs("staging"); !maps.Equal(got, machines) {
		t.Errorf("machines after the refused runs: %v, want %v", got, machines)
	}

	ask("")
	if c := r.reconcile("r4", "staging with the key it has", repo); c.Status.Phase != schema.CommitSucceeded {
		t.Errorf("without serviceAccountKey: %s %s", c.Status.Phase, c.Status.Message)
	}
}
