package reconciler

import (
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// recordOutcome records the outcome of a run in the tenant's status, in
// one transaction (status.Recorder.Outcome): outcome gets the tenant's
// status as stored and returns what to record. A tenant not stored yet is
// created from its manifests td, forming, so that the API shows it;
// without td there is nothing to record.
func (r *Reconciler) recordOutcome(name string, td *schema.TenantDesired, gen int64, outcome func(stored schema.TenantStatus) status.Outcome) error {
	var declared *schema.Tenant
	if td != nil {
		declared = td.Tenant
	}
	return r.store.Update(func(tx store.Tx) error {
		return status.Record(tx, r.opts.Now()).Outcome(name, declared, gen, outcome)
	})
}
