package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Store keys of the resources the reconciler writes. Tenant-scoped kinds
// are keyed "TENANT/NAME" so that names need only be unique per tenant.
//
//	Tenant       TENANT
//	NodeGroup    TENANT/NODEGROUP
//	ConfigPatch  TENANT/PATCH
//	Machine      PROVIDER-ID
//	Commit       REVISION (":" replaced by "-")
//	Provider     PROVIDER-CLASS
func scopedKey(tenant, name string) string { return tenant + "/" + name }

func (r *Reconciler) putCommit(c *schema.Commit, also func(store.Tx) error) {
	status.Commit(&c.Status, r.opts.Now())
	err := r.store.Update(func(tx store.Tx) error {
		if also != nil {
			if err := also(tx); err != nil {
				return err
			}
		}
		_, err := tx.PutObject(schema.KindCommit, c.Metadata.Name, c)
		return err
	})
	if err != nil {
		r.log.Error("record commit", "revision", c.Spec.SHA, "err", err)
		return
	}
	if r.opts.OnCommit != nil {
		cp := *c
		cp.Status.Tenants = append([]schema.TenantResult(nil), c.Status.Tenants...)
		cp.Status.Problems = append([]schema.Problem(nil), c.Status.Problems...)
		cp.Status.Conditions = append(schema.Conditions(nil), c.Status.Conditions...)
		r.opts.OnCommit(&cp)
	}
}

// finishedCommit returns the stored Commit of name when it has finished,
// else nil.
func (r *Reconciler) finishedCommit(name string) *schema.Commit {
	var c *schema.Commit
	_ = r.store.View(func(tx store.Tx) error {
		v, err := getJSON[schema.Commit](tx, schema.KindCommit, name)
		if err == nil && v.Status.Phase.Done() {
			c = v
		}
		return nil
	})
	return c
}

// putProviders records the provider modules of this build.
func (r *Reconciler) putProviders() error {
	return r.store.Update(func(tx store.Tx) error {
		for _, name := range r.modules.Names() {
			m := r.modules[name]
			p := m.Provider()
			spec := schema.ProviderSpec{Class: name, Source: p.Source, Version: p.Version, Builtin: true}
			for _, mp := range m.Mappings() {
				spec.Mappings = append(spec.Mappings, schema.TypeMapping{TFType: mp.TFType, Kind: mp.Kind})
			}
			obj := &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider,
				Metadata: schema.ObjectMeta{Name: name}, Spec: spec,
				Status: schema.ProviderStatus{Available: true}}
			if _, err := tx.PutObject(schema.KindProvider, name, obj); err != nil {
				return err
			}
		}
		return nil
	})
}

func (r *Reconciler) appliedRecords() (map[string]*appliedRecord, error) {
	out := map[string]*appliedRecord{}
	err := r.store.View(func(tx store.Tx) error {
		list, err := tx.List(kindApplied)
		if err != nil {
			return err
		}
		for _, res := range list {
			var rec appliedRecord
			if err := json.Unmarshal(res.Object, &rec); err != nil {
				return fmt.Errorf("applied record %s: %w", res.Name, err)
			}
			out[rec.Tenant] = &rec
		}
		return nil
	})
	return out, err
}

// appliedRecord returns what the reconciler last applied to a tenant, or
// nil when it never did.
func (r *Reconciler) appliedRecord(tenant string) (*appliedRecord, error) {
	var rec *appliedRecord
	err := r.store.View(func(tx store.Tx) error {
		v, err := getJSON[appliedRecord](tx, kindApplied, tenant)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		rec = v
		return err
	})
	return rec, err
}

func getJSON[T any](tx store.Tx, kind, key string) (*T, error) {
	v := new(T)
	if err := tx.GetObject(kind, key, v); err != nil {
		return nil, err
	}
	return v, nil
}

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

// project turns a tenant's TF state into Machines through the provider
// modules' mappings.
func (r *Reconciler) project(tenant string, st *tfjson.State) ([]*schema.Machine, error) {
	if st == nil || st.Values == nil || st.Values.RootModule == nil {
		return nil, nil
	}
	mappings := map[string]struct {
		class string
		m     render.Mapping
	}{}
	for _, class := range r.modules.Names() {
		for _, mp := range r.modules[class].Mappings() {
			mappings[mp.TFType] = struct {
				class string
				m     render.Mapping
			}{class, mp}
		}
	}
	var out []*schema.Machine
	var walk func(m *tfjson.StateModule)
	walk = func(m *tfjson.StateModule) {
		for _, res := range m.Resources {
			mp, ok := mappings[res.Type]
			if !ok || mp.m.Kind != schema.KindMachine || res.Mode != tfjson.ManagedResourceMode {
				continue
			}
			f := mp.m.Extract(res.AttributeValues)
			if f.ProviderID == "" {
				continue
			}
			ng := f.NodeGroup
			if ng == "" {
				ng = nodeGroupOf(res.Name)
			}
			idx := indexOf(res.Index)
			if f.Index != nil {
				idx = *f.Index
			}
			mc := &schema.Machine{
				APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{
					Name: f.ProviderID,
					Labels: map[string]string{
						schema.LabelTenant:    tenant,
						schema.LabelRole:      f.Role,
						schema.LabelNodeGroup: ng,
						schema.LabelProvider:  mp.class,
					},
					Annotations: map[string]string{modeldiff.AnnotationSlot: modeldiff.SlotKey(ng, idx)},
				},
				Spec: schema.MachineSpec{
					ManagementAddress: f.Address, ProviderID: f.ProviderID, ProviderClass: mp.class,
					Shape: f.Shape, Hostname: f.Hostname, Role: f.Role, Tenant: tenant, NodeGroup: ng,
					TFAddress: res.Address,
				},
			}
			projectCloudFacts(mc, f)
			out = append(out, mc)
		}
		for _, c := range m.ChildModules {
			walk(c)
		}
	}
	walk(st.Values.RootModule)
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata.Name < out[j].Metadata.Name })
	return out, nil
}

// withMachines returns the plan summary sum with its machines counted
// apart: the changes of a node group's resources (render.ResourceName)
// whose TF type a provider module maps to Machines. Other resources of a
// mapped type are no machines, such as the Talos secrets, a
// terraform_data like a bare-metal machine's record.
func (r *Reconciler) withMachines(sum schema.PlanSummary, changes []tofu.PlannedChange) schema.PlanSummary {
	machine := map[string]bool{}
	for _, class := range r.modules.Names() {
		for _, mp := range r.modules[class].Mappings() {
			if mp.Kind == schema.KindMachine {
				machine[mp.TFType] = true
			}
		}
	}
	sum.Machines = schema.PlanCounts{}
	for _, c := range changes {
		if typ, name := resourceOf(c.Address); !machine[typ] || !strings.HasPrefix(name, render.ResourceName("")) {
			continue
		}
		for _, a := range c.Actions {
			switch a {
			case "create":
				sum.Machines.Add++
			case "update":
				sum.Machines.Change++
			case "delete":
				sum.Machines.Destroy++
			}
		}
	}
	return sum
}

// resourceOf splits a managed resource's address such as
// "module.m.rezussim_machine.ng_cp[0]" into its TF type and name; both
// are "" for a data source.
func resourceOf(addr string) (typ, name string) {
	for {
		rest, ok := strings.CutPrefix(addr, "module.")
		if !ok {
			break
		}
		if _, addr, ok = strings.Cut(rest, "."); !ok {
			return "", ""
		}
	}
	if strings.HasPrefix(addr, "data.") {
		return "", ""
	}
	typ, name, _ = strings.Cut(addr, ".")
	name, _, _ = strings.Cut(name, "[")
	return typ, name
}

// projectCloudFacts records what a real cloud's provider says about a
// machine beyond the spec: its zone as the Kubernetes topology label, its
// public address and the cloud's state of it as annotations.
func projectCloudFacts(mc *schema.Machine, f render.MachineFacts) {
	if f.Zone != "" {
		mc.Metadata.Labels[schema.LabelZone] = f.Zone
	}
	if f.PublicAddress != "" {
		mc.Metadata.Annotations[schema.AnnotationPublicAddress] = f.PublicAddress
	}
	if f.State != "" {
		mc.Metadata.Annotations[schema.AnnotationProviderState] = f.State
	}
}

// storedMachines returns the machines of a tenant as the store has them.
func (r *Reconciler) storedMachines(tenant string) ([]*schema.Machine, error) {
	var out []*schema.Machine
	err := r.store.View(func(tx store.Tx) error {
		return tx.TenantObjects(tenant, schema.KindMachine, func(res store.Resource) error {
			m := new(schema.Machine)
			if err := json.Unmarshal(res.Object, m); err != nil {
				return fmt.Errorf("machine %s: %w", res.Name, err)
			}
			out = append(out, m)
			return nil
		})
	})
	return out, err
}

func nodeGroupOf(resourceName string) string {
	if len(resourceName) > 3 && resourceName[:3] == "ng_" {
		return resourceName[3:]
	}
	return resourceName
}

func indexOf(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case json.Number:
		n, _ := x.Int64()
		return int(n)
	}
	return 0
}

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

// markDeleting gives a tenant that left git its deletionTimestamp and
// finalizers, and the phase removing.
func (r *Reconciler) markDeleting(name string, gen int64) error {
	now := r.opts.Now()
	return r.recordOutcome(name, nil, gen, func(t *schema.Tenant) status.Outcome {
		if t.Metadata.DeletionTimestamp == nil {
			t.Metadata.DeletionTimestamp = &now
		}
		t.Metadata.Finalizers = []string{schema.FinalizerMachines, schema.FinalizerSecrets}
		t.Status.Phase = schema.TenantRemoving
		return status.Destroying(gen)
	})
}

// removeTenant runs after a successful destroy: the machines go and their
// finalizer clears, the current state goes (its history stays) and the
// secrets finalizer clears, then the tenant's records go.
func (r *Reconciler) removeTenant(ctx context.Context, name string, creds tofu.Creds) error {
	err := r.store.Update(func(tx store.Tx) error {
		if err := deleteTenantObjects(tx, name, schema.KindMachine, nil); err != nil {
			return err
		}
		t, err := getJSON[schema.Tenant](tx, schema.KindTenant, name)
		if err != nil {
			return nil
		}
		t.Metadata.Finalizers = []string{schema.FinalizerSecrets}
		_, err = tx.PutObject(schema.KindTenant, name, t)
		return err
	})
	if err != nil {
		return err
	}
	if err := deleteState(ctx, creds); err != nil {
		return err
	}
	return r.store.Update(func(tx store.Tx) error {
		for _, kind := range []string{schema.KindNodeGroup, schema.KindConfigPatch} {
			if err := deleteTenantObjects(tx, name, kind, nil); err != nil {
				return err
			}
		}
		if t, err := getJSON[schema.Tenant](tx, schema.KindTenant, name); err == nil {
			t.Metadata.Finalizers = nil
			if _, err := tx.PutObject(schema.KindTenant, name, t); err != nil {
				return err
			}
			if _, err := tx.Delete(schema.KindTenant, name); err != nil {
				return err
			}
		}
		if _, err := tx.Delete(kindApplied, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
}

// appliedIndex keeps in memory what a revision's validation and its quiet
// check read of every tenant's records: of its applied record the input
// hash, revision, generation and annotations (not the model or the init
// inputs), and whether its stored Tenant's status is settled. It follows
// the store through the store's commit hook: every committed change of an
// applied record or a Tenant, whoever writes it, updates it before the
// write returns.
type appliedIndex struct {
	mu      sync.Mutex
	stopped bool
	applied map[string]*appliedRecord
	settled map[string]bool
	bad     map[string]error // applied records that do not decode
}

// openIndex reads every applied record and Tenant into a new index and
// hooks it to the store's commits. The reading happens in a write
// transaction, which the next write waits for, and the hook is in place
// before it ends: no change is missed, none is applied to stale data.
func openIndex(st store.Store) (*appliedIndex, error) {
	idx := &appliedIndex{applied: map[string]*appliedRecord{}, settled: map[string]bool{}, bad: map[string]error{}}
	err := st.Update(func(tx store.Tx) error {
		err := tx.Scan(kindApplied, "", func(res store.Resource) error {
			idx.putApplied(res.Name, res.Object)
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Scan(schema.KindTenant, "", func(res store.Resource) error {
			idx.settled[res.Name] = settledStatus(res.Object)
			return nil
		})
		if err != nil {
			return err
		}
		st.OnCommit(idx.follow)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read applied records: %w", err)
	}
	return idx, nil
}

// putApplied records the applied record of tenant stored as data.
func (idx *appliedIndex) putApplied(tenant string, data []byte) {
	var rec struct {
		Tenant      string            `json:"tenant"`
		Revision    string            `json:"revision"`
		Generation  int64             `json:"generation"`
		InputHash   string            `json:"inputHash"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		delete(idx.applied, tenant)
		idx.bad[tenant] = fmt.Errorf("applied record %s: %w", tenant, err)
		return
	}
	delete(idx.bad, tenant)
	idx.applied[tenant] = &appliedRecord{Tenant: rec.Tenant, Revision: rec.Revision, Generation: rec.Generation,
		InputHash: rec.InputHash, Annotations: rec.Annotations}
}

// follow is the index's commit hook.
func (idx *appliedIndex) follow(changes []store.Change) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if idx.stopped {
		return
	}
	for _, c := range changes {
		res := c.Resource
		switch {
		case res.Kind == kindApplied && c.Type == store.Deleted:
			delete(idx.applied, res.Name)
			delete(idx.bad, res.Name)
		case res.Kind == kindApplied:
			idx.putApplied(res.Name, res.Object)
		case res.Kind == schema.KindTenant && c.Type == store.Deleted:
			delete(idx.settled, res.Name)
		case res.Kind == schema.KindTenant:
			idx.settled[res.Name] = settledStatus(res.Object)
		}
	}
}

// records returns the applied records, keyed by tenant, as the index has
// them: without model and init inputs. They must not be modified.
func (idx *appliedIndex) records() (map[string]*appliedRecord, error) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	for _, err := range idx.bad {
		return nil, err
	}
	return maps.Clone(idx.applied), nil
}

// isSettled reports whether each of tenants has a stored status that is
// settled (see settledStatus).
func (idx *appliedIndex) isSettled(tenants []string) map[string]bool {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	out := make(map[string]bool, len(tenants))
	for _, name := range tenants {
		out[name] = idx.settled[name]
	}
	return out
}

// stop unhooks the index from the store: it is of no use once its
// reconciler is closed.
func (idx *appliedIndex) stop() {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	idx.stopped = true
	idx.applied, idx.settled, idx.bad = nil, nil, nil
}
