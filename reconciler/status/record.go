package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Recorder is the one writer of the stored status of tenants, node groups
// and machines, and of the objects that carry it. Each method records what
// happened (a run's outcome, what it applied, a drift check's finding, a
// suspension, what the plane observed) in the transaction the Recorder was
// made for; the functions of this package compute the status from that and
// from what is stored, and the method writes it.
type Recorder struct {
	tx    store.Tx
	now   time.Time
	check bool
}

// Record returns the recorder of tx, a write transaction; now is the time
// of any condition whose status changes.
func Record(tx store.Tx, now time.Time) Recorder { return Recorder{tx: tx, now: now} }

// Check returns a recorder that computes what Record's would and reports
// whether anything would change, but writes nothing, so that tx may be a
// read transaction. Only the methods that report a change take one
// (Drift, Resumed, MachineObserved, TenantObserved); the others fail.
func Check(tx store.Tx, now time.Time) Recorder { return Recorder{tx: tx, now: now, check: true} }

// WriteChanged runs fn with a Check recorder in a read transaction of st
// and, when it reports a change, again with a Record recorder in a write
// transaction: what finds the stored status as it is costs no write.
func WriteChanged(st store.Store, now time.Time, fn func(Recorder) (changed bool, err error)) (changed bool, err error) {
	err = st.View(func(tx store.Tx) (err error) {
		changed, err = fn(Check(tx, now))
		return err
	})
	if err != nil || !changed {
		return changed, err
	}
	err = st.Update(func(tx store.Tx) (err error) {
		changed, err = fn(Record(tx, now))
		return err
	})
	return changed, err
}

// put stores obj as kind/key.
func (r Recorder) put(kind, key string, obj schema.Object) error {
	if r.check {
		return fmt.Errorf("status of %s %s: a Check recorder writes nothing", kind, key)
	}
	_, err := r.tx.PutObject(kind, key, obj)
	return err
}

// tenant reads the stored tenant name. One not stored yet is made from
// its manifest declared (Redacted), with created set, so that the API
// shows it; nil when declared is nil too.
func (r Recorder) tenant(name string, declared *schema.Tenant) (t *schema.Tenant, created bool, err error) {
	declared = declared.Redacted()
	t = new(schema.Tenant)
	err = r.tx.GetObject(schema.KindTenant, name, t)
	switch {
	case errors.Is(err, store.ErrNotFound) && declared == nil:
		return nil, false, nil
	case errors.Is(err, store.ErrNotFound):
		t = &schema.Tenant{APIVersion: declared.APIVersion, Kind: declared.Kind, Metadata: declared.Metadata.Declared(),
			Spec: declared.Spec}
		backupDeclared(t)
		return t, true, nil
	case err != nil:
		return nil, false, err
	}
	return t, false, nil
}

// putTenant computes the rest of t's status (Compute) from its node
// groups and machines as stored, and stores t.
func (r Recorder) putTenant(name string, t *schema.Tenant) error {
	ngs, machines, err := storedParts(r.tx, name)
	if err != nil {
		return err
	}
	t.Status = Compute(Tenant{Status: t.Status, Generation: t.Metadata.Generation, NodeGroups: ngs, Machines: machines,
		APIAnswers: t.Status.APIReady}, r.now).Tenant
	return r.put(schema.KindTenant, name, t)
}

// storedParts returns a tenant's node groups and machines as stored.
func storedParts(tx store.Tx, tenant string) ([]*schema.NodeGroup, []*schema.Machine, error) {
	ngs, err := store.DecodeTenantObjects[schema.NodeGroup](tx, tenant, schema.KindNodeGroup)
	if err != nil {
		return nil, nil, err
	}
	machines, err := store.DecodeTenantObjects[schema.Machine](tx, tenant, schema.KindMachine)
	return ngs, machines, err
}

// nodeGroupKey is the store key of a tenant's node group (or config
// patch): "TENANT/NAME".
func nodeGroupKey(tenant, name string) string { return tenant + "/" + name }

// Outcome records the outcome of a run of tenant name for generation gen:
// outcome gets the tenant's status as stored and returns what to record
// (Applying, Retrying, Stalled, Waiting, ...). A tenant not stored yet is
// made from declared; without declared there is nothing to record.
func (r Recorder) Outcome(name string, declared *schema.Tenant, gen int64, outcome func(stored schema.TenantStatus) Outcome) error {
	t, _, err := r.tenant(name, declared)
	if err != nil || t == nil {
		return err
	}
	t.Metadata.Generation = gen
	outcome(t.Status).Record(&t.Status, r.now)
	return r.putTenant(name, t)
}

// Removing records that tenant name left git and is being destroyed: its
// deletionTimestamp and finalizers, the phase removing and the outcome
// Destroying.
func (r Recorder) Removing(name string, gen int64) error {
	t, _, err := r.tenant(name, nil)
	if err != nil || t == nil {
		return err
	}
	if t.Metadata.DeletionTimestamp == nil {
		now := r.now
		t.Metadata.DeletionTimestamp = &now
	}
	t.Metadata.Finalizers = []string{schema.FinalizerMachines, schema.FinalizerSecrets}
	t.Metadata.Generation = gen
	t.Status.Phase = schema.TenantRemoving
	Destroying(gen).Record(&t.Status, r.now)
	return r.putTenant(name, t)
}

// Drift records what a drift check of tenant name found: its Drifted
// condition (Drifted), written only when it changes. It returns the
// status the condition had ("" for none) and whether it changes.
func (r Recorder) Drift(name string, d Drift) (was schema.ConditionStatus, changed bool, err error) {
	var t schema.Tenant
	if err := r.tx.GetObject(schema.KindTenant, name, &t); err != nil {
		return "", false, err
	}
	cond := Drifted(d)
	old := t.Status.Conditions.Get(schema.ConditionDrifted)
	if old != nil {
		was = old.Status
	}
	if old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message &&
		old.ObservedGeneration == cond.ObservedGeneration {
		return was, false, nil
	}
	if r.check {
		return was, true, nil
	}
	t.Status.Conditions = t.Status.Conditions.Set(cond, r.now)
	return was, true, r.put(schema.KindTenant, name, &t)
}

// Suspended records that tenant name is suspended and that the changes p
// wait: status.pending and the Suspended condition. A tenant not stored
// yet is made from declared, at generation gen.
func (r Recorder) Suspended(name string, declared *schema.Tenant, gen int64, p schema.PendingChanges) error {
	if p.Since.IsZero() {
		p.Since = r.now
	}
	t, created, err := r.tenant(name, declared)
	if err != nil || t == nil {
		return err
	}
	if created {
		t.Metadata.Generation = gen
	}
	t.Status.Pending = &p
	t.Status.Conditions = t.Status.Conditions.Set(suspended(p, gen), r.now)
	return r.putTenant(name, t)
}

// Resumed records that tenant name is no longer suspended: what a
// suspension recorded in its status goes. It reports whether there was
// anything to clear.
func (r Recorder) Resumed(name string) (changed bool, err error) {
	t, _, err := r.tenant(name, nil)
	if err != nil || t == nil {
		return false, err
	}
	if t.Status.Pending == nil && t.Status.Conditions.Get(schema.ConditionSuspended) == nil {
		return false, nil
	}
	if r.check {
		return true, nil
	}
	t.Status.Pending = nil
	t.Status.Conditions = t.Status.Conditions.Remove(schema.ConditionSuspended)
	return true, r.putTenant(name, t)
}

// sameJSON reports whether a and b are stored as the same JSON.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
