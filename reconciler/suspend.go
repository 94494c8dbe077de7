package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Suspension. A Tenant whose manifest carries schema.AnnotationSuspend:
// "true" is left alone: no apply, no destroy, no drift correction, no Talos
// bootstrap or rollout. Every commit is still validated as a whole, and
// the changes it would make to a suspended tenant are recorded on the
// tenant (status.pending and the Suspended condition) instead of applied.
//
// Which tenants are suspended is decided per revision, before its tenants
// are queued (the NoteSuspended revision step): the reconciler keeps a
// record per suspended tenant (kindSuspended). The Suspend step of every
// tenant run reads that record, so that a run of an older revision (a
// retry, a drift correction) stops too, and so does the Talos plane
// between two machines of a rollout already under way.
//
// What the pending changes are is worked out from the diff of the
// revision's manifests against those last applied (package modeldiff:
// node groups added, removed or scaled, patches changed), not from a tofu
// plan: a suspended tenant must cost no tofu run, hold no state lock and
// reach no cloud, and the diff says in the manifests' own terms what will
// happen once the suspension ends. Flux shows only that an object is
// suspended; Argo CD shows OutOfSync with the diff; this is the diff.
//
// A suspended tenant removed from git is not destroyed, as Flux does not
// act on the removal of a suspended object: its removal waits, recorded
// as a pending deletion. Only a commit unsuspends it, and one that has
// removed it can do that only by restoring its manifest without the
// annotation (or with "false"): that commit applies it as declared, and a
// later commit that removes it destroys it. The API has no way to lift a
// suspension, since nothing changes a cluster but a commit.

// kindSuspended is the store kind of the reconciler's record of a
// suspended tenant, keyed by tenant. The API does not serve it.
const kindSuspended = "SuspendedTenant"

// suspendRecord says that a tenant is suspended, since when, and by which
// revision, the newest one that holds it back.
type suspendRecord struct {
	Tenant   string    `json:"tenant"`
	Revision string    `json:"revision"`
	Since    time.Time `json:"since"`
}

// noteSuspended records which tenants of the revision are suspended: a
// record for each whose manifest says so, none for the others. A tenant
// the revision removes keeps its record, so that its removal waits (see
// guardDeletions); one that was never applied has nothing to destroy, and
// its record and status go.
func (run *CommitRun) noteSuspended(context.Context) (stepResult, error) {
	r, rev := run.r, run.snap.Revision
	want := map[string]bool{}
	for _, td := range run.desired.Tenants {
		want[td.Tenant.Metadata.Name] = schema.Suspended(td.Tenant.Metadata.Annotations)
	}
	err := r.store.Update(func(tx store.Tx) error {
		recs, err := suspendRecords(tx)
		if err != nil {
			return err
		}
		for name, suspend := range want {
			old := recs[name]
			switch {
			case suspend && (old == nil || old.Revision != rev):
				rec := &suspendRecord{Tenant: name, Revision: rev, Since: r.opts.Now()}
				if old != nil {
					rec.Since = old.Since
				}
				if _, err := tx.Put(kindSuspended, name, mustJSON(rec)); err != nil {
					return err
				}
			case !suspend && old != nil:
				if _, err := tx.Delete(kindSuspended, name); err != nil {
					return err
				}
				// Resumed: cleared now, also when the revision leaves the
				// tenant as last applied and no run of it follows.
				if _, err := status.Record(tx, r.opts.Now()).Resumed(name); err != nil {
					return err
				}
			}
		}
		for name := range recs {
			if _, inGit := want[name]; !inGit && run.applied[name] == nil {
				if err := dropUnapplied(tx, name); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return stepNext, retry(schema.ReasonStoreError, err)
}

// suspendRecords reads every suspend record.
func suspendRecords(tx store.Tx) (map[string]*suspendRecord, error) {
	list, err := tx.List(kindSuspended)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*suspendRecord, len(list))
	for _, res := range list {
		rec, err := getJSON[suspendRecord](tx, kindSuspended, res.Name)
		if err != nil {
			return nil, fmt.Errorf("suspend record %s: %w", res.Name, err)
		}
		out[res.Name] = rec
	}
	return out, nil
}

// dropUnapplied removes what a suspended tenant that was never applied
// left in the store, once it is gone from git: its record and its status.
func dropUnapplied(tx store.Tx, name string) error {
	for _, kind := range []string{kindSuspended, schema.KindTenant} {
		if _, err := tx.Delete(kind, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// suspension returns the suspend record of a tenant, nil when it is not
// suspended.
func (r *Reconciler) suspension(tenant string) (*suspendRecord, error) {
	rec, err := viewRecord[suspendRecord](r.store, kindSuspended, tenant)
	if err != nil {
		return nil, fmt.Errorf("read suspend record of %s: %w", tenant, err)
	}
	return rec, nil
}

// suspended reports whether a tenant is suspended now. A store that cannot
// be read counts as suspended: nothing runs until it can be.
func (r *Reconciler) suspended(tenant string) bool {
	rec, err := r.suspension(tenant)
	if err != nil {
		r.log.Error("suspended", "tenant", tenant, "err", err)
		return true
	}
	return rec != nil
}

// suspend is the step that ends a run of a suspended tenant before
// anything runs for it: it records the changes the run would have made as
// pending. For a tenant that is not suspended it clears what an earlier
// suspension recorded, and the run goes on.
func (t *tenantRun) suspend(context.Context) (stepResult, error) {
	rec, err := t.r.suspension(t.name)
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	if rec == nil && (t.desired == nil || !schema.Suspended(t.desired.Tenant.Metadata.Annotations)) {
		return stepNext, retry(schema.ReasonStoreError, t.r.resumed(t.name))
	}
	t.res.Reason = schema.ReasonSuspended
	if rec == nil || (t.desired != nil && rec.Revision != t.job.run.snap.Revision) {
		// A run of another revision than the newest (a retry, a drift
		// correction, a suspending revision that a newer one resumed):
		// nothing runs, and what waits is the newest revision's business.
		return stepDone, nil
	}
	p := schema.PendingChanges{Revision: t.job.run.snap.Revision, Deletion: t.desired == nil}
	if rec != nil {
		p.Since = rec.Since
	}
	var prev modeldiff.Model
	gen := int64(0)
	if t.prev != nil {
		prev, gen = t.prev.Model, t.prev.Generation
	}
	if t.desired != nil {
		p.Summary = pendingSummary(modeldiff.Diff(prev, t.model))
	}
	return stepDone, retry(schema.ReasonStoreError, t.r.recordSuspended(t.name, t.desired, gen, p))
}

// holdSuspended keeps a suspended tenant that the revision removes from
// being destroyed: its removal is recorded as pending.
func (run *CommitRun) holdSuspended(name string) {
	run.results[name] = &schema.TenantResult{Tenant: name, Phase: schema.CommitSucceeded, Reason: schema.ReasonSuspended}
	p := schema.PendingChanges{Revision: run.snap.Revision, Deletion: true}
	if rec, err := run.r.suspension(name); err == nil && rec != nil {
		p.Since = rec.Since
	}
	if err := run.r.recordSuspended(name, nil, run.applied[name].Generation, p); err != nil {
		run.r.log.Error("record tenant status", "tenant", name, "err", err)
	}
}

// recordSuspended records in a tenant's status that it is suspended and
// what waits (status.Recorder.Suspended). A tenant not stored yet is
// created from its manifests td, as recordOutcome does.
func (r *Reconciler) recordSuspended(name string, td *schema.TenantDesired, gen int64, p schema.PendingChanges) error {
	var declared *schema.Tenant
	if td != nil {
		declared = td.Tenant
	}
	return r.store.Update(func(tx store.Tx) error {
		return status.Record(tx, r.opts.Now()).Suspended(name, declared, gen, p)
	})
}

// resumed clears what a suspension recorded in a tenant's status, if
// anything: the run that follows applies the pending changes. It writes
// only when there is something to clear.
func (r *Reconciler) resumed(name string) error {
	_, err := status.WriteChanged(r.store, r.opts.Now(), func(rec status.Recorder) (bool, error) {
		return rec.Resumed(name)
	})
	return err
}

// pendingSummary says in a line what a diff of manifests would change:
// the tenant's spec, node groups added, removed, scaled or changed,
// patches added, removed or changed, and the machines that come and go.
func pendingSummary(changes []modeldiff.ObjectChange) string {
	var parts []string
	added, removed := 0, 0
	for _, c := range changes {
		switch c.Kind {
		case schema.KindTenant:
			parts = append(parts, objectChange("tenant", "", c))
		case schema.KindNodeGroup:
			parts = append(parts, nodeGroupChange(c))
		case schema.KindConfigPatch:
			parts = append(parts, objectChange("patch", c.Name, c))
		case schema.KindMachine:
			switch c.Action {
			case modeldiff.ActionCreate:
				added++
			case modeldiff.ActionDelete:
				removed++
			}
		}
	}
	if added > 0 || removed > 0 {
		parts = append(parts, fmt.Sprintf("machines +%d -%d", added, removed))
	}
	if len(parts) == 0 {
		return "no changes to the manifests"
	}
	return strings.Join(parts, "; ")
}

// nodeGroupChange describes a node group's change, a new count first.
func nodeGroupChange(c modeldiff.ObjectChange) string {
	if c.Action != modeldiff.ActionUpdate {
		return objectChange("node group", c.Name, c)
	}
	var rest []modeldiff.FieldChange
	scaled := ""
	for _, f := range c.Fields {
		if f.Path == "/count" {
			scaled = fmt.Sprintf("node group %s scaled %v → %v", c.Name, f.Old, f.New)
			continue
		}
		rest = append(rest, f)
	}
	if len(rest) == 0 {
		return scaled
	}
	other := objectChange("node group", c.Name, modeldiff.ObjectChange{Action: c.Action, Fields: rest})
	if scaled == "" {
		return other
	}
	return scaled + ", " + strings.TrimPrefix(other, "node group "+c.Name+" ")
}

// objectChange describes an object added, removed, or changed in the
// fields it names.
func objectChange(what, name string, c modeldiff.ObjectChange) string {
	subject := strings.TrimSpace(what + " " + name)
	switch c.Action {
	case modeldiff.ActionCreate:
		return subject + " added"
	case modeldiff.ActionDelete:
		return subject + " removed"
	}
	seen := map[string]bool{}
	var fields []string
	for _, f := range c.Fields {
		top := strings.SplitN(strings.TrimPrefix(f.Path, "/"), "/", 2)[0]
		if !seen[top] {
			seen[top] = true
			fields = append(fields, top)
		}
	}
	sort.Strings(fields)
	return subject + " changed (" + strings.Join(fields, ", ") + ")"
}
