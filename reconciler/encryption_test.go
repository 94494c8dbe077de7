package reconciler

import (
	"context"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/store"
)

func (r *rig) rawState(tenant string) string {
	var raw []byte
	_ = r.srv.Store().View(func(tx store.Tx) error {
		raw = append([]byte(nil), store.CurrentState(tx, tenant)...)
		return nil
	})
	return string(raw)
}

// switchRunner replaces the rig's reconciler with one whose tofu runs get
// extra environment, as a restart with new settings would.
func (r *rig) restartWith(t *testing.T, env map[string]string, encrypt bool) {
	t.Helper()
	old := r.rec.Runner().Options()
	merged := map[string]string{}
	for k, v := range old.Env {
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	old.Env = merged
	runner, err := tofu.NewRunner(old)
	if err != nil {
		t.Fatal(err)
	}
	opts := r.rec.opts
	opts.EncryptState = encrypt
	r.rec.Close()
	rec, err := New(r.srv.Store(), runner, render.Builtin(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	r.rec = rec
}

// TestEncryptStateOfExistingInstallation: an installation that ran without
// encryption turns it on with the migration fallback, every tenant's state
// gets rewritten encrypted with nothing lost, and then encryption is
// enforced.
func TestEncryptStateOfExistingInstallation(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	plain := r.rawState("production")
	bundle, _, _ := secretsFromStateFile([]byte(plain))
	addrs := r.simBlockPrefix()
	if bundle == nil || !strings.Contains(plain, addrs) {
		t.Fatal("the unencrypted state holds no bundle or addresses: the test would prove nothing")
	}
	machines := r.machines()

	migrate, err := tofu.EncryptionConfig("correct-horse-battery-staple", true)
	if err != nil {
		t.Fatal(err)
	}
	r.restartWith(t, map[string]string{"TF_ENCRYPTION": migrate}, true)
	runs := r.rec.Runner().Runs()
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	if r.rec.Runner().Runs() == runs {
		t.Fatal("turning encryption on rewrote no state")
	}
	for _, tenant := range []string{"production", "staging"} {
		enc := r.rawState(tenant)
		if !strings.Contains(enc, "encrypted_data") {
			t.Fatalf("%s's state is not encrypted: %.200s", tenant, enc)
		}
		for _, leak := range []string{addrs, "BEGIN", "talos_bundle", string(bundle[:40])} {
			if strings.Contains(enc, leak) {
				t.Errorf("%s's encrypted state holds %q in plain text", tenant, leak)
			}
		}
	}
	if got := r.machines(); len(got) != len(machines) {
		t.Fatalf("migration changed machines: %d, had %d", len(got), len(machines))
	}
	for id, m := range machines {
		if r.machines()[id].Metadata.UID != m.Metadata.UID {
			t.Errorf("machine %s changed by the migration", id)
		}
	}

	// Enforced from now on: changes apply, projection works through tofu
	// show, and the secrets read back decrypt to the same CA.
	enforced, err := tofu.EncryptionConfig("correct-horse-battery-staple", false)
	if err != nil {
		t.Fatal(err)
	}
	r.restartWith(t, map[string]string{"TF_ENCRYPTION": enforced}, true)
	scaled := examples(t)
	f := "production/nodegroups.yaml"
	scaled[f].Data = []byte(strings.Replace(string(scaled[f].Data), "count: 2", "count: 3", 1))
	c := r.reconcile("rev2", "scale", scaled)
	mustSucceed(t, c)
	if n := countBy(r.machines(), "production", "workers"); n != 3 {
		t.Fatalf("production workers = %d after scaling with encrypted state, want 3", n)
	}
	if kc, err := r.rec.Kubeconfig(context.Background(), "production"); err != nil || !strings.Contains(string(kc), "client-certificate-data") {
		t.Fatalf("kubeconfig from encrypted state: %v", err)
	}
	for _, tr := range c.Status.Tenants {
		if strings.Contains(tr.OutputTail, "correct-horse") || strings.Contains(tr.OutputTail, string(bundle[:40])) {
			t.Errorf("tofu output of %s shows secrets", tr.Tenant)
		}
	}
}
