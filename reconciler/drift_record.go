package reconciler

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
)

// record writes what a drift check found: the tenant's Drifted condition
// (only when it changes, status.Recorder.Drift), the gauge, a log line,
// the report, and under the policy "correct" the run that corrects the
// drift.
func (d *driftRun) record() error {
	r, rev := d.r, d.prev.Revision
	var found []string
	msg := driftMessage(d.found.Resources, d.talos)
	drifted := msg != ""
	dr := status.Drift{Revision: rev, Generation: d.prev.Generation, Found: msg}
	if drifted {
		for _, res := range d.found.Resources {
			found = append(found, res.Address)
		}
		if schema.DriftPolicy(d.desired.Tenant.Metadata.Annotations) == schema.DriftPolicyCorrect {
			dr.Correction = d.correctOnce(msg)
		}
	}
	if !drifted {
		r.drift.corrected(d.name, "")
	}
	r.opts.Metrics.Drifted(d.name, map[bool]float64{false: 0, true: 1}[drifted])
	var was schema.ConditionStatus
	changed, err := status.WriteChanged(r.store, r.opts.Now(), func(rec status.Recorder) (changed bool, err error) {
		was, changed, err = rec.Drift(d.name, dr)
		return changed, err
	})
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
		r.opts.OnDrift(DriftReport{Tenant: d.name, Revision: rev, Drifted: drifted, Message: status.Drifted(dr).Message})
	}
	return nil
}

// correctOnce corrects the drift msg describes unless a correction of the
// same drift ran already and left it (drift of an attribute that the
// configuration ignores, such as a machine's user data), and says what it
// did.
func (d *driftRun) correctOnce(msg string) status.Correction {
	if d.r.drift.corrected(d.name, msg) {
		return status.CorrectionRemained
	}
	if !d.correct() {
		d.r.drift.corrected(d.name, "")
		return status.CorrectionPending
	}
	d.r.log.Info("correcting drift: the applied revision runs again", "tenant", d.name, "revision", d.prev.Revision)
	return status.Correcting
}

// correct queues the tenant's last applied revision to run again, as a
// retry of the run that applied it, unless a run of the tenant is pending
// already (a newer revision, or a correction); it reports whether it
// queued one. A check that the leader handed over asks the leader to.
func (d *driftRun) correct() bool {
	if d.given {
		d.askCorrect = true
		return true
	}
	return d.r.drift.correct(d.name, d.applied)
}

// correct queues a run of ap, the run that applied tenant, to correct
// its drift, and reports whether it queued one.
func (d *driftState) correct(tenant string, ap appliedRun) bool {
	run := ap.run
	run.mu.Lock()
	run.retrying++
	run.mu.Unlock()
	job := &tenantJob{run: run, tenant: tenant, desired: ap.desired, attempt: 1, correct: true}
	if d.r.queue.Retry(tenant, job, 0) {
		return true
	}
	run.mu.Lock()
	run.retrying--
	run.mu.Unlock()
	return false
}
