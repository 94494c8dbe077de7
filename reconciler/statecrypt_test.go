package reconciler

import (
	"bytes"
	"testing"

	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
)

// TestTalosBundleFromEncryptedStateAfterRestart: after a restart, the
// plane's observer gets the secrets of a tenant whose state tofu encrypted
// from the stored state and the passphrase, without a tofu run; a wrong
// passphrase gives none.
func TestTalosBundleFromEncryptedStateAfterRestart(t *testing.T) {
	const passphrase = "correct-horse-battery-staple"
	r := newRig(t)
	enc, err := tofu.EncryptionConfig(passphrase, false)
	if err != nil {
		t.Fatal(err)
	}
	r.restartWith(t, map[string]string{"TF_ENCRYPTION": enc}, true)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	want := r.rec.secrets.get("production")
	if want == nil {
		t.Fatal("the run kept no bundle: the test would prove nothing")
	}
	if _, encrypted, _ := secretsFromStateFile([]byte(r.rawState("production"))); !encrypted {
		t.Fatal("the stored state is not encrypted")
	}

	restart := func(pass string) *Reconciler {
		opts := r.rec.opts
		opts.StatePassphrase = pass
		rec, err := New(r.srv.Store(), r.rec.Runner(), render.Builtin(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Close)
		return rec
	}
	runs := r.rec.Runner().Runs()
	if got := restart(passphrase).TalosBundle("production"); !bytes.Equal(got, want) {
		t.Fatalf("bundle after a restart: %d bytes, want the run's %d", len(got), len(want))
	}
	if got := restart("a-wrong-passphrase-of-length").TalosBundle("production"); got != nil {
		t.Fatal("a wrong passphrase gave a bundle")
	}
	if got := restart("").TalosBundle("production"); got != nil {
		t.Fatal("no passphrase gave a bundle")
	}
	if r.rec.Runner().Runs() != runs {
		t.Fatal("reading the bundle ran tofu")
	}
}
