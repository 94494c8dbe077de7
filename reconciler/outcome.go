package reconciler

import (
	"errors"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// recordOutcome records the outcome of a run in the tenant's status, in
// one transaction: outcome gets the tenant as stored and returns what to
// record; the status package computes the rest from it and the tenant's
// node groups and machines as stored. A tenant not stored yet is created
// from its manifests td, forming, so that the API shows it; without td
// there is nothing to record.
func (r *Reconciler) recordOutcome(name string, td *schema.TenantDesired, gen int64, outcome func(*schema.Tenant) status.Outcome) error {
	now := r.opts.Now()
	return r.store.Update(func(tx store.Tx) error {
		t, err := getJSON[schema.Tenant](tx, schema.KindTenant, name)
		switch {
		case errors.Is(err, store.ErrNotFound) && td == nil:
			return nil
		case errors.Is(err, store.ErrNotFound):
			t = &schema.Tenant{APIVersion: td.Tenant.APIVersion, Kind: td.Tenant.Kind, Metadata: cleanMeta(td.Tenant.Metadata), Spec: td.Tenant.Spec}
		case err != nil:
			return err
		}
		t.Metadata.Generation = gen
		outcome(t).Record(&t.Status, now)
		ngs, machines, err := storedParts(tx, name)
		if err != nil {
			return err
		}
		t.Status = status.Compute(status.Tenant{Status: t.Status, Generation: gen, NodeGroups: ngs, Machines: machines,
			APIAnswers: t.Status.APIReady}, now).Tenant
		_, err = tx.PutObject(schema.KindTenant, name, t)
		return err
	})
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

// cleanMeta keeps what a manifest may set: name, labels, annotations.
func cleanMeta(m schema.ObjectMeta) schema.ObjectMeta {
	return schema.ObjectMeta{Name: m.Name, Labels: m.Labels, Annotations: m.Annotations}
}
