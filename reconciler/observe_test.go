package reconciler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/reconciler/simobserve"
	"github.com/rezuscloud/rezuscloud/schema"
)

func TestObserveSimSetsStatusOnly(t *testing.T) {
	r := newRig(t)
	mustSucceed(t, r.reconcile("rev1", "first", examples(t)))
	before := r.machines()
	observer := simobserve.New(simobserve.Options{Store: r.srv.Store(), Dir: r.simDir, Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if err := observer.Observe(); err != nil {
		t.Fatal(err)
	}
	after := r.machines()
	var gone string
	for id, m := range after {
		if m.Status.Stage != schema.StageReady || !m.Status.Ready {
			t.Errorf("machine %s: stage %q ready %v a minute after creation", id, m.Status.Stage, m.Status.Ready)
		}
		if string(mustJSON(m.Spec)) != string(mustJSON(before[id].Spec)) || m.Metadata.UID != before[id].Metadata.UID {
			t.Errorf("machine %s: observing changed its spec or uid", id)
		}
		gone = id
	}
	var tenant schema.Tenant
	_ = r.srv.Store().View(func(tx *backend.Tx) error {
		res, err := tx.Get(schema.KindTenant, "production")
		if err == nil {
			err = json.Unmarshal(res.Object, &tenant)
		}
		return err
	})
	if !tenant.Status.Ready || !tenant.Status.ControlPlaneReady || tenant.Status.Machines.Ready != 5 {
		t.Errorf("production status %+v, want ready with 5 ready machines", tenant.Status)
	}

	// A machine removed behind tofu's back is reported off.
	if err := os.Remove(filepath.Join(r.simDir, gone+".json")); err != nil {
		t.Fatal(err)
	}
	if err := observer.Observe(); err != nil {
		t.Fatal(err)
	}
	if m := r.machines()[gone]; m.Status.Stage != schema.StageOff || m.Status.Ready {
		t.Errorf("removed machine %s: stage %q", gone, m.Status.Stage)
	}
}
