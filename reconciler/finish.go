package reconciler

import (
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// finishTenant writes, in one transaction, everything a successful apply
// changes: the tenant, its node groups and patches as applied, its machines
// (keeping their observed status), and the applied record. The statuses
// come from the status package.
func (r *Reconciler) finishTenant(td *schema.TenantDesired, rec *appliedRecord, machines []*schema.Machine) error {
	name := td.Tenant.Metadata.Name
	now := r.opts.Now()
	return r.store.Update(func(tx store.Tx) error {
		// Machines: put the projected ones, drop the ones that are gone.
		seen := map[string]bool{}
		for _, mc := range machines {
			seen[mc.Metadata.Name] = true
			if old, err := getJSON[schema.Machine](tx, schema.KindMachine, mc.Metadata.Name); err == nil {
				mc.Status = old.Status
			}
			if _, err := tx.PutObject(schema.KindMachine, mc.Metadata.Name, mc); err != nil {
				return err
			}
		}
		if err := deleteTenantObjects(tx, name, schema.KindMachine, seen); err != nil {
			return err
		}

		// The tenant and its node groups as applied, with the statuses
		// computed from them and the machines.
		t := &schema.Tenant{}
		if old, err := getJSON[schema.Tenant](tx, schema.KindTenant, name); err == nil {
			t.Status = old.Status
		}
		if t.Status.Phase == schema.TenantRemoving {
			t.Status.Phase = "" // back in git before its removal finished
		}
		t.APIVersion, t.Kind, t.Spec = td.Tenant.APIVersion, td.Tenant.Kind, td.Tenant.Spec
		t.Metadata = cleanMeta(td.Tenant.Metadata)
		t.Metadata.Generation = rec.Generation
		t.Status.ObservedCommit = rec.Revision
		status.Applied(rec.Revision, rec.Generation).Record(&t.Status, now)
		ngs := make([]*schema.NodeGroup, 0, len(td.NodeGroups))
		for _, ng := range td.NodeGroups {
			obj := *ng
			obj.Metadata = cleanMeta(ng.Metadata)
			obj.Status = schema.NodeGroupStatus{}
			if old, err := getJSON[schema.NodeGroup](tx, schema.KindNodeGroup, scopedKey(name, ng.Metadata.Name)); err == nil {
				obj.Status = old.Status
			}
			ngs = append(ngs, &obj)
		}
		st := status.Compute(status.Tenant{Status: t.Status, Generation: rec.Generation, NodeGroups: ngs, Machines: machines,
			APIAnswers: t.Status.APIReady}, now)
		t.Status = st.Tenant
		keep := map[string]bool{}
		for _, ng := range ngs {
			key := scopedKey(name, ng.Metadata.Name)
			keep[key] = true
			ng.Status = st.NodeGroups[ng.Metadata.Name]
			if _, err := tx.PutObject(schema.KindNodeGroup, key, ng); err != nil {
				return err
			}
		}
		if err := deleteTenantObjects(tx, name, schema.KindNodeGroup, keep); err != nil {
			return err
		}
		keep = map[string]bool{}
		for _, p := range td.Patches {
			key := scopedKey(name, p.Metadata.Name)
			keep[key] = true
			obj := *p
			obj.Metadata = cleanMeta(p.Metadata)
			obj.Status = schema.ConfigPatchStatus{Machines: patchMachines(td, p)}
			if _, err := tx.PutObject(schema.KindConfigPatch, key, &obj); err != nil {
				return err
			}
		}
		if err := deleteTenantObjects(tx, name, schema.KindConfigPatch, keep); err != nil {
			return err
		}
		if _, err := tx.PutObject(schema.KindTenant, name, t); err != nil {
			return err
		}
		_, err := tx.Put(kindApplied, name, mustJSON(rec))
		return err
	})
}

// patchMachines counts the machines a ConfigPatch applies to.
func patchMachines(td *schema.TenantDesired, p *schema.ConfigPatch) int {
	n := 0
	for _, ng := range td.NodeGroups {
		if p.Spec.TargetRole == "" || p.Spec.TargetRole == ng.Role() {
			n += ng.Spec.Count
		}
	}
	return n
}
