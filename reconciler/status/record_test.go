package status

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func record(t *testing.T, st store.Store, now time.Time, fn func(Recorder) error) {
	t.Helper()
	if err := st.Update(func(tx store.Tx) error { return fn(Record(tx, now)) }); err != nil {
		t.Fatal(err)
	}
}

func storedTenant(t *testing.T, st store.Store, name string) *schema.Tenant {
	t.Helper()
	var tn schema.Tenant
	err := st.View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, name, &tn) })
	if err != nil {
		t.Fatal(err)
	}
	return &tn
}

func revision(t *testing.T, st store.Store) uint64 {
	t.Helper()
	var rv uint64
	_ = st.View(func(tx store.Tx) error { rv = tx.ResourceVersion(); return nil })
	return rv
}

// desired is tenant alpha's manifests: one control plane and two workers.
func desired() *schema.TenantDesired {
	tn := storetest.Tenant("alpha", "prod", 1)
	tn.Status = schema.TenantStatus{}
	return &schema.TenantDesired{Tenant: tn, NodeGroups: []*schema.NodeGroup{
		storetest.NodeGroup("alpha", "cp", schema.RoleControlPlane, 1, 2),
		storetest.NodeGroup("alpha", "w", schema.RoleWorker, 2, 3),
	}}
}

// TestRecordOutcome: an outcome creates a tenant not stored yet from its
// manifest, forming, and records nothing for one without a manifest; the
// status around it is computed.
func TestRecordOutcome(t *testing.T) {
	st := openStore(t)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	record(t, st, now, func(r Recorder) error {
		return r.Outcome("ghost", nil, 1, func(schema.TenantStatus) Outcome { return Applying("abc", 1) })
	})
	if rv := revision(t, st); rv != 0 {
		t.Fatalf("an outcome of a tenant neither stored nor declared wrote revision %d", rv)
	}
	td := desired()
	record(t, st, now, func(r Recorder) error {
		return r.Outcome("alpha", td.Tenant, 1, func(schema.TenantStatus) Outcome { return Applying("abcdef0123456789", 1) })
	})
	tn := storedTenant(t, st, "alpha")
	if tn.Metadata.Generation != 1 || tn.Status.Phase != schema.TenantForming || tn.Metadata.Labels["env"] != "prod" {
		t.Fatalf("created tenant: generation %d, phase %s, labels %v", tn.Metadata.Generation, tn.Status.Phase, tn.Metadata.Labels)
	}
	if c := cond(t, tn.Status.Conditions, schema.ConditionReconciling); c.Status != schema.ConditionTrue || c.Message != "applying revision abcdef012345" {
		t.Fatalf("Reconciling: %+v", c)
	}
	if c := cond(t, tn.Status.Conditions, schema.ConditionReady); c.Status != schema.ConditionUnknown || c.Reason != schema.ReasonProgressing {
		t.Fatalf("Ready: %+v", c)
	}
}

// TestRecordAppliedInPlane: a tenant whose run goes on in the Talos plane
// stays Reconciling, and Ready says that work progresses, until the run's
// end records Applied; then Ready follows the machines.
func TestRecordAppliedInPlane(t *testing.T) {
	st := openStore(t)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	td := desired()
	machines := []*schema.Machine{
		storetest.Machine("m-cp", "alpha", "cp", schema.RoleControlPlane, "small", 4),
		storetest.Machine("m-w0", "alpha", "w", schema.RoleWorker, "small", 5),
		storetest.Machine("m-w1", "alpha", "w", schema.RoleWorker, "small", 6),
	}
	for _, m := range machines {
		m.Status = schema.MachineStatus{}
	}
	record(t, st, now, func(r Recorder) error {
		return r.Applied(Apply{Desired: td, Revision: "abcdef0123456789", Generation: 1, Machines: machines, InPlane: true})
	})
	tn := storedTenant(t, st, "alpha")
	rec := cond(t, tn.Status.Conditions, schema.ConditionReconciling)
	if rec.Status != schema.ConditionTrue || rec.Reason != schema.ReasonApplying || !strings.Contains(rec.Message, "Talos plane") {
		t.Fatalf("Reconciling while in the plane: %+v", rec)
	}
	if c := cond(t, tn.Status.Conditions, schema.ConditionReady); c.Status != schema.ConditionUnknown || c.Reason != schema.ReasonProgressing {
		t.Fatalf("Ready while in the plane: %+v", c)
	}
	if tn.Status.ObservedCommit != "abcdef0123456789" || tn.Status.Machines.Total != 3 {
		t.Fatalf("applied status: %+v", tn.Status)
	}
	later := now.Add(time.Minute)
	record(t, st, later, func(r Recorder) error {
		return r.Outcome("alpha", td.Tenant, 1, func(schema.TenantStatus) Outcome { return Applied("abcdef0123456789", 1) })
	})
	tn = storedTenant(t, st, "alpha")
	rec = cond(t, tn.Status.Conditions, schema.ConditionReconciling)
	if rec.Status != schema.ConditionFalse || rec.Reason != schema.ReasonApplied || !rec.LastTransitionTime.Equal(later) {
		t.Fatalf("Reconciling after the plane: %+v", rec)
	}
	if c := cond(t, tn.Status.Conditions, schema.ConditionReady); c.Status != schema.ConditionFalse || c.Reason != schema.ReasonMachinesNotReady {
		t.Fatalf("Ready after the plane, no machine ready: %+v", c)
	}
}

// TestWriteChangedWritesOnlyChanges: a drift check that finds what the
// last one found writes nothing; a Check recorder refuses to write.
func TestWriteChangedWritesOnlyChanges(t *testing.T) {
	st := openStore(t)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	td := desired()
	record(t, st, now, func(r Recorder) error {
		return r.Outcome("alpha", td.Tenant, 1, func(schema.TenantStatus) Outcome { return Applied("abc", 1) })
	})
	d := Drift{Revision: "abc", Generation: 1, Found: "rezussim_machine.ng_w[0] changed: shape", Correction: Correcting}
	drift := func(r Recorder) (changed bool, err error) {
		_, changed, err = r.Drift("alpha", d)
		return changed, err
	}
	if changed, err := WriteChanged(st, now, drift); err != nil || !changed {
		t.Fatalf("first drift: changed %v, %v", changed, err)
	}
	c := cond(t, storedTenant(t, st, "alpha").Status.Conditions, schema.ConditionDrifted)
	if want := "drifted from revision abc: rezussim_machine.ng_w[0] changed: shape; correcting: revision abc is applied again"; c.Status != schema.ConditionTrue || c.Message != want {
		t.Fatalf("Drifted: %+v, want message %q", c, want)
	}
	rv := revision(t, st)
	if changed, err := WriteChanged(st, now.Add(time.Minute), drift); err != nil || changed {
		t.Fatalf("the same drift again: changed %v, %v", changed, err)
	}
	if got := revision(t, st); got != rv {
		t.Fatalf("the same drift again wrote: revision %d, was %d", got, rv)
	}
	err := st.View(func(tx store.Tx) error {
		return Check(tx, now).Outcome("alpha", nil, 1, func(schema.TenantStatus) Outcome { return Applied("abc", 1) })
	})
	if err == nil || !strings.Contains(err.Error(), "writes nothing") {
		t.Fatalf("an outcome through a Check recorder: %v", err)
	}
}

// TestMachineObserved: a probe changes a machine's status only when the
// facts it found differ; a machine gone meanwhile is left alone.
func TestMachineObserved(t *testing.T) {
	st := openStore(t)
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	m := storetest.Machine("m-cp", "alpha", "cp", schema.RoleControlPlane, "small", 4)
	m.Status = schema.MachineStatus{}
	if err := st.Update(func(tx store.Tx) error { _, err := tx.PutObject(schema.KindMachine, "m-cp", m); return err }); err != nil {
		t.Fatal(err)
	}
	p := Probe{At: now, Connected: true, Stage: schema.StageReady, Ready: true, TalosVersion: "v1.12.6",
		ConfigSHA256: "aa", Want: "aa", Address: "127.0.0.2"}
	observe := func(key string, p Probe) bool {
		t.Helper()
		changed, err := WriteChanged(st, now, func(r Recorder) (bool, error) { return r.MachineObserved(key, p) })
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !observe("m-cp", p) {
		t.Fatal("a first probe changed nothing")
	}
	p.At = now.Add(time.Second)
	if observe("m-cp", p) {
		t.Fatal("a probe that found the same facts later changed the status")
	}
	p.Connected, p.Error, p.LastAnswered = false, "connection refused", now.Add(time.Second)
	if !observe("m-cp", p) {
		t.Fatal("a machine that stopped answering did not change")
	}
	var got schema.Machine
	_ = st.View(func(tx store.Tx) error { return tx.GetObject(schema.KindMachine, "m-cp", &got) })
	if got.Status.Connected || got.Status.Ready || got.Status.Stage != schema.StageInitializing || !got.Status.ConfigUpToDate {
		t.Fatalf("status of a machine that stopped answering: %+v", got.Status)
	}
	if observe("gone", p) {
		t.Fatal("a machine that is not stored changed")
	}
}
