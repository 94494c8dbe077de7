package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"filippo.io/age"

	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// sopsRig is a rig whose reconciler decrypts with an age identity.
type sopsRig struct {
	*rig
	key *age.X25519Identity
}

func newSOPSRig(t *testing.T) *sopsRig {
	t.Helper()
	key, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "age.agekey")
	if err := os.WriteFile(file, []byte(key.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := sopsfile.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, func(o *Options) { o.Decrypt, o.HashKey = ids, []byte("input hash key of the test") })
	return &sopsRig{rig: r, key: key}
}

// encrypted returns examples with production's ConfigPatch "registry",
// whose patch holds password, encrypted for to.
func (s *sopsRig) encrypted(password string, to ...*age.X25519Identity) fstest.MapFS {
	s.t.Helper()
	plain := `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: registry
  labels:
    rezuscloud.io/tenant: production
spec:
  patch: |
    machine:
      registries:
        config:
          registry.example.com:
            auth:
              username: robot
              password: ` + password + "\n"
	var recipients []string
	for _, id := range to {
		recipients = append(recipients, id.Recipient().String())
	}
	b, err := sopsfile.Encrypt([]byte(plain), recipients, "^patch$")
	if err != nil {
		s.t.Fatal(err)
	}
	return withFile(examples(s.t), "production/registry.yaml", string(b))
}

// rawRecords returns the stored form of every record of kinds.
func (s *sopsRig) rawRecords(kinds ...string) string {
	s.t.Helper()
	var b strings.Builder
	err := s.srv.Store().View(func(tx store.Tx) error {
		for _, kind := range kinds {
			list, err := tx.List(kind)
			if err != nil {
				return err
			}
			for _, res := range list {
				b.Write(res.Object)
			}
		}
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return b.String()
}

func plainValue() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "plain-" + hex.EncodeToString(b)
}

// TestEncryptedValuesStayInMemory: a patch encrypted with SOPS is applied,
// and its plain value is in no record of the store (the objects, the
// applied record, the commit), in no preview and in no machine config the
// API serves; the store shows <encrypted>. Encrypting it again for another
// recipient runs no tofu; changing it does.
func TestEncryptedValuesStayInMemory(t *testing.T) {
	s := newSOPSRig(t)
	secret := plainValue()
	mustSucceed(t, s.reconcile("rev1", "first", s.encrypted(secret, s.key)))

	records := s.rawRecords(schema.KindTenant, schema.KindNodeGroup, schema.KindConfigPatch, schema.KindCommit, kindApplied)
	if strings.Contains(records, secret) {
		t.Fatal("the store holds the plain value")
	}
	var p schema.ConfigPatch
	err := s.srv.Store().View(func(tx store.Tx) error { return tx.GetObject(schema.KindConfigPatch, "production/registry", &p) })
	if err != nil || p.Spec.Patch != schema.EncryptedValue {
		t.Fatalf("stored patch %q (%v), want %s", p.Spec.Patch, err, schema.EncryptedValue)
	}
	rec, err := s.rec.appliedRecord("production")
	if err != nil || rec.Model.Patches["registry"].Patch != schema.EncryptedValue {
		t.Fatalf("applied model of the patch: %+v (%v)", rec.Model.Patches["registry"], err)
	}
	desired, err := schema.Load(s.encrypted(secret, s.key), ".", &schema.Options{Decrypt: s.rec.opts.Decrypt})
	if err != nil {
		t.Fatal(err)
	}
	if td := desired.Tenant("production"); rec.InputHash != inputHash(td, s.rec.opts.HashKey) || rec.InputHash == inputHash(td, nil) {
		t.Error("the stored input hash is not the one keyed with Options.HashKey")
	}

	// The machine config the API serves leaves the patch out, and says so.
	var worker string
	for id, m := range s.machines() {
		if m.Spec.Tenant == "production" && m.Spec.Role == schema.RoleWorker {
			worker = id
		}
	}
	cfg, err := s.rec.MachineConfig(context.Background(), "production", worker)
	if err != nil || strings.Contains(string(cfg), secret) || !strings.HasPrefix(string(cfg), "# Left out: the patches registry,") {
		t.Errorf("machine config (%v):\n%.300s", err, cfg)
	}

	runs := s.rec.Runner().Runs()
	other, _ := age.GenerateX25519Identity()
	c := s.reconcile("rev2", "the same value for two recipients", s.encrypted(secret, other, s.key))
	mustSucceed(t, c)
	if got := s.rec.Runner().Runs(); got != runs {
		t.Errorf("re-encrypting the same value ran tofu %d times, want none", got-runs)
	}

	changed := plainValue()
	res, err := s.rec.Preview(context.Background(), preview.Request{Files: files(t, s.encrypted(changed, s.key)), Plan: true, Rendered: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	if prod := tenantOf(res, "production"); !res.Valid || prod == nil || prod.Plan == nil || strings.Contains(string(b), changed) {
		t.Errorf("preview of a changed value: %.500s", b)
	}
	mustSucceed(t, s.reconcile("rev3", "a new value", s.encrypted(changed, s.key)))
	if s.rec.Runner().Runs() == runs {
		t.Error("a changed encrypted value ran no tofu")
	}
	if records := s.rawRecords(schema.KindTenant, schema.KindConfigPatch, schema.KindCommit, kindApplied); strings.Contains(records, changed) {
		t.Error("the store holds the changed plain value")
	}
}

// A tree with encrypted files is refused by a reconciler without a key, and
// one that encrypts a value the server shows (here a node group's count's
// sibling providerClass) is refused at that value.
func TestEncryptedRefused(t *testing.T) {
	s := newSOPSRig(t)
	r := newRig(t) // no key
	c := r.reconcile("rev1", "encrypted, no key", s.encrypted(plainValue(), s.key))
	if c.Status.Phase != schema.CommitInvalid || len(c.Status.Problems) != 1 || c.Status.Problems[0].File != "production/registry.yaml" ||
		!strings.Contains(c.Status.Problems[0].Message, "no age key") {
		t.Errorf("without a key: %s %+v", c.Status.Phase, c.Status.Problems)
	}

	fsys := examples(t)
	ngs := string(fsys["production/nodegroups.yaml"].Data)
	b, err := sopsfile.Encrypt([]byte(ngs), []string{s.key.Recipient().String()}, "^providerClass$")
	if err != nil {
		t.Fatal(err)
	}
	fsys["production/nodegroups.yaml"].Data = b
	c = s.reconcile("rev2", "an encrypted providerClass", fsys)
	if c.Status.Phase != schema.CommitInvalid || len(c.Status.Problems) == 0 {
		t.Fatalf("an encrypted providerClass: %s %+v", c.Status.Phase, c.Status.Problems)
	}
	for _, p := range c.Status.Problems {
		if p.File != "production/nodegroups.yaml" || p.Path != "/spec/providerClass" || p.Line <= 0 || !strings.Contains(p.Message, "only patches") {
			t.Errorf("problem %s", p)
		}
	}
}

// Text made from a tenant's decrypted objects (a Talos problem, a run's
// error) has their values replaced by <encrypted>, also where it quotes a
// word of a patch encrypted as a whole.
func TestScrubber(t *testing.T) {
	src := schema.NewSource("p.yaml", 1, map[string]int{"/spec/patch": 7})
	src.Encrypted = []string{"/spec/patch"}
	td := &schema.TenantDesired{Tenant: &schema.Tenant{}, Patches: []*schema.ConfigPatch{{
		Spec: schema.ConfigPatchSpec{Patch: "machine:\n  network:\n    hostname: node_s3cret!\n"}, Source: src}}}
	probs := scrubProblems(td, []schema.Problem{{File: "p.yaml", Line: 7, Message: `invalid hostname "node_s3cret!": bad character`}})
	if got := probs[0].Message; got != `invalid hostname "<encrypted>": bad character` {
		t.Errorf("scrubbed: %q", got)
	}
	if got := scrubber(td)("machine.network.hostname: node_s3cret!"); strings.Contains(got, "s3cret") {
		t.Errorf("scrubbed: %q", got)
	}
	plain := &schema.TenantDesired{Tenant: &schema.Tenant{}}
	if got := scrubber(plain)("hostname node_s3cret!"); got != "hostname node_s3cret!" {
		t.Errorf("a tenant without encrypted values: %q", got)
	}
}
