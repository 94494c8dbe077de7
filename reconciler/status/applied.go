package status

import (
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Apply is what a run that applied a tenant's manifests leaves.
type Apply struct {
	// Desired are the manifests applied: the tenant, its node groups and
	// its patches.
	Desired *schema.TenantDesired
	// Revision and Generation are the revision applied and the tenant's
	// generation.
	Revision   string
	Generation int64
	// Machines are the machines that exist now, as projected from the
	// tenant's TF state.
	Machines []*schema.Machine
	// InPlane says that the run goes on in the Talos plane (a bootstrap, a
	// rollout): the tenant then stays Reconciling (InPlane) until an
	// outcome of the run's end is recorded.
	InPlane bool
}

// Applied records everything a successful apply changes: the tenant, its
// node groups and patches as applied (Redacted: their encrypted values
// never reach the store), its machines (keeping their observed status;
// those gone are deleted), with the statuses computed from them, and the
// outcome Applied (or InPlane).
func (r Recorder) Applied(a Apply) error {
	a.Desired = a.Desired.Redacted()
	name := a.Desired.Tenant.Metadata.Name
	if err := r.putMachines(name, a.Machines); err != nil {
		return err
	}
	t := r.appliedTenant(name, a)
	ngs := make([]*schema.NodeGroup, 0, len(a.Desired.NodeGroups))
	for _, ng := range a.Desired.NodeGroups {
		obj := *ng
		obj.Metadata, obj.Status = ng.Metadata.Declared(), schema.NodeGroupStatus{}
		var old schema.NodeGroup
		if err := r.tx.GetObject(schema.KindNodeGroup, nodeGroupKey(name, ng.Metadata.Name), &old); err == nil {
			obj.Status = old.Status
		}
		ngs = append(ngs, &obj)
	}
	st := Compute(Tenant{Status: t.Status, Generation: a.Generation, NodeGroups: ngs, Machines: a.Machines,
		APIAnswers: t.Status.APIReady}, r.now)
	t.Status = st.Tenant
	keep := map[string]bool{}
	for _, ng := range ngs {
		key := nodeGroupKey(name, ng.Metadata.Name)
		keep[key] = true
		ng.Status = st.NodeGroups[ng.Metadata.Name]
		if err := r.put(schema.KindNodeGroup, key, ng); err != nil {
			return err
		}
	}
	if err := deleteTenantObjects(r.tx, name, schema.KindNodeGroup, keep); err != nil {
		return err
	}
	if err := r.putPatches(a.Desired); err != nil {
		return err
	}
	return r.put(schema.KindTenant, name, t)
}

// appliedTenant is the tenant of a as applied, its status as stored with
// the outcome recorded.
func (r Recorder) appliedTenant(name string, a Apply) *schema.Tenant {
	td := a.Desired
	t := &schema.Tenant{}
	var old schema.Tenant
	if err := r.tx.GetObject(schema.KindTenant, name, &old); err == nil {
		t.Status = old.Status
	}
	if t.Status.Phase == schema.TenantRemoving {
		t.Status.Phase = "" // back in git before its removal finished
	}
	t.APIVersion, t.Kind, t.Spec = td.Tenant.APIVersion, td.Tenant.Kind, td.Tenant.Spec
	backupDeclared(t)
	t.Metadata = td.Tenant.Metadata.Declared()
	t.Metadata.Generation = a.Generation
	t.Status.ObservedCommit = a.Revision
	outcome := Applied(a.Revision, a.Generation)
	if a.InPlane {
		outcome = InPlane(a.Revision, a.Generation)
	}
	outcome.Record(&t.Status, r.now)
	return t
}

// putMachines stores the tenant's machines as projected, each with its
// status as stored, and deletes those no longer there.
func (r Recorder) putMachines(tenant string, machines []*schema.Machine) error {
	seen := map[string]bool{}
	for _, mc := range machines {
		seen[mc.Metadata.Name] = true
		var old schema.Machine
		if err := r.tx.GetObject(schema.KindMachine, mc.Metadata.Name, &old); err == nil {
			mc.Status = old.Status
		}
		schema.SetHardwareLabels(&mc.Metadata, mc.Status.Hardware)
		if err := r.put(schema.KindMachine, mc.Metadata.Name, mc); err != nil {
			return err
		}
	}
	return deleteTenantObjects(r.tx, tenant, schema.KindMachine, seen)
}

// putPatches stores the tenant's config patches as applied, each with the
// count of machines it applies to, and deletes those no longer there.
func (r Recorder) putPatches(td *schema.TenantDesired) error {
	name := td.Tenant.Metadata.Name
	keep := map[string]bool{}
	for _, p := range td.Patches {
		key := nodeGroupKey(name, p.Metadata.Name)
		keep[key] = true
		obj := *p
		obj.Metadata = p.Metadata.Declared()
		obj.Status = schema.ConfigPatchStatus{Machines: patchMachines(td, p)}
		if err := r.put(schema.KindConfigPatch, key, &obj); err != nil {
			return err
		}
	}
	return deleteTenantObjects(r.tx, name, schema.KindConfigPatch, keep)
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

// MachinesDestroyed records that a destroy removed every machine of
// tenant name: the machines go, and so does the tenant's machines
// finalizer.
func (r Recorder) MachinesDestroyed(name string) error {
	if err := deleteTenantObjects(r.tx, name, schema.KindMachine, nil); err != nil {
		return err
	}
	var t schema.Tenant
	if err := r.tx.GetObject(schema.KindTenant, name, &t); err != nil {
		return nil
	}
	t.Metadata.Finalizers = []string{schema.FinalizerSecrets}
	return r.put(schema.KindTenant, name, &t)
}

// Removed records that tenant name is gone, its state included: its node
// groups and patches go, its last finalizer clears, and then the tenant.
func (r Recorder) Removed(name string) error {
	for _, kind := range []string{schema.KindNodeGroup, schema.KindConfigPatch} {
		if err := deleteTenantObjects(r.tx, name, kind, nil); err != nil {
			return err
		}
	}
	var t schema.Tenant
	if err := r.tx.GetObject(schema.KindTenant, name, &t); err != nil {
		return nil
	}
	t.Metadata.Finalizers = nil
	if err := r.put(schema.KindTenant, name, &t); err != nil {
		return err
	}
	_, err := r.tx.Delete(schema.KindTenant, name)
	return err
}

// deleteTenantObjects deletes the objects of kind that belong to tenant,
// except those keep names.
func deleteTenantObjects(tx store.Tx, tenant, kind string, keep map[string]bool) error {
	var gone []string
	err := tx.TenantObjects(tenant, kind, func(res store.Resource) error {
		if !keep[res.Name] {
			gone = append(gone, res.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, key := range gone {
		if _, err := tx.Delete(kind, key); err != nil {
			return err
		}
	}
	return nil
}
