package reconciler

import (
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// finishTenant writes, in one transaction, everything a successful apply
// changes: the tenant, its node groups, patches and machines as
// status.Recorder.Applied records them, and the applied record. inPlane
// says that the Talos plane's steps follow, so that the tenant stays
// Reconciling until the run ends (planeDone).
func (r *Reconciler) finishTenant(td *schema.TenantDesired, rec *appliedRecord, machines []*schema.Machine, inPlane bool) error {
	return r.store.Update(func(tx store.Tx) error {
		err := status.Record(tx, r.opts.Now()).Applied(status.Apply{Desired: td, Revision: rec.Revision,
			Generation: rec.Generation, Machines: machines, InPlane: inPlane})
		if err != nil {
			return err
		}
		_, err = tx.Put(kindApplied, td.Tenant.Metadata.Name, mustJSON(rec))
		return err
	})
}
