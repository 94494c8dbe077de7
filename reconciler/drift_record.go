package reconciler

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// record writes what a drift check found: the tenant's Drifted condition
// (only when it changes), the gauge, a log line, the report, and under the
// policy "correct" the run that corrects the drift.
func (d *driftRun) record() error {
	r, rev := d.r, d.prev.Revision
	var found []string
	msg := driftMessage(d.found.Resources, d.talos)
	drifted := msg != ""
	cond := schema.Condition{Type: schema.ConditionDrifted, Status: schema.ConditionFalse, Reason: schema.ReasonNoDrift,
		Message: "the infrastructure and machine configs are as revision " + shortRev(rev) + " applied them", ObservedGeneration: d.prev.Generation}
	if drifted {
		cond.Status, cond.Reason, cond.Message = schema.ConditionTrue, schema.ReasonInfrastructureDrifted, "drifted from revision "+shortRev(rev)+": "+msg
		for _, res := range d.found.Resources {
			found = append(found, res.Address)
		}
		if schema.DriftPolicy(d.desired.Tenant.Metadata.Annotations) == schema.DriftPolicyCorrect {
			cond.Message += d.correctOnce(msg)
		}
	}
	if !drifted {
		r.drift.corrected(d.name, "")
	}
	r.opts.Metrics.Drifted(d.name, map[bool]float64{false: 0, true: 1}[drifted])
	was, changed, err := r.setDrifted(d.name, cond)
	if err != nil {
		return fmt.Errorf("record drift of %s: %w", d.name, err)
	}
	switch {
	case drifted:
		r.log.Warn("tenant drifted", "tenant", d.name, "revision", rev, "resources", found, "machines", d.talos, "drift", msg)
	case was == schema.ConditionTrue:
		r.log.Info("tenant no longer drifted", "tenant", d.name, "revision", rev)
	}
	if changed && r.opts.OnDrift != nil {
		r.opts.OnDrift(DriftReport{Tenant: d.name, Revision: rev, Drifted: drifted, Message: cond.Message})
	}
	return nil
}

// correctOnce corrects the drift msg describes unless a correction of the
// same drift ran already and left it (drift of an attribute that the
// configuration ignores, such as a machine's user data), and says what it
// did for the condition's message.
func (d *driftRun) correctOnce(msg string) string {
	rev := shortRev(d.prev.Revision)
	if d.r.drift.corrected(d.name, msg) {
		return "; revision " + rev + " was applied again and this drift remained: the configuration ignores it or tofu cannot change it"
	}
	if !d.correct() {
		d.r.drift.corrected(d.name, "")
		return "; a run of the tenant is pending, which corrects it"
	}
	d.r.log.Info("correcting drift: the applied revision runs again", "tenant", d.name, "revision", d.prev.Revision)
	return "; correcting: revision " + rev + " is applied again"
}

// correct queues the tenant's last applied revision to run again, as a
// retry of the run that applied it, unless a run of the tenant is pending
// already (a newer revision, or a correction); it reports whether it
// queued one.
func (d *driftRun) correct() bool {
	run := d.applied.run
	run.mu.Lock()
	run.retrying++
	run.mu.Unlock()
	job := &tenantJob{run: run, tenant: d.name, desired: d.applied.desired, attempt: 1, correct: true}
	if d.r.queue.Retry(d.name, job, 0) {
		return true
	}
	run.mu.Lock()
	run.retrying--
	run.mu.Unlock()
	return false
}

// setDrifted sets the tenant's Drifted condition; it returns the status
// the condition had ("" for none) and whether the stored tenant changed.
func (r *Reconciler) setDrifted(tenant string, cond schema.Condition) (was schema.ConditionStatus, changed bool, err error) {
	same := func(old *schema.Condition) bool {
		return old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message &&
			old.ObservedGeneration == cond.ObservedGeneration
	}
	// Most checks find what the last one found: they read, and write nothing.
	err = r.store.View(func(tx store.Tx) error {
		tn, err := getJSON[schema.Tenant](tx, schema.KindTenant, tenant)
		if err == nil && same(tn.Status.Conditions.Get(schema.ConditionDrifted)) {
			was = cond.Status
		}
		return err
	})
	if err != nil || was != "" {
		return was, false, err
	}
	err = r.store.Update(func(tx store.Tx) error {
		tn, err := getJSON[schema.Tenant](tx, schema.KindTenant, tenant)
		if err != nil {
			return err
		}
		old := tn.Status.Conditions.Get(schema.ConditionDrifted)
		if old != nil {
			was = old.Status
		}
		if same(old) {
			return nil
		}
		changed = true
		tn.Status.Conditions = tn.Status.Conditions.Set(cond, r.opts.Now())
		_, err = tx.PutObject(schema.KindTenant, tenant, tn)
		return err
	})
	return was, changed, err
}
