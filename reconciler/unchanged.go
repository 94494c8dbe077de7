package reconciler

import (
	"errors"
	"path/filepath"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/schema"
)

// A revision's tenants fall in two sets. Those it changed (or that have
// something left to do) are queued and run applySteps. The others are
// quiet: their manifests hash to what was last applied to them, their last
// run ended well and left nothing behind, and no job of theirs waits or
// runs. A quiet tenant gets its result in the Commit at once, and nothing
// of it is written: its records (the Tenant's status.observedCommit among
// them) stay those of the commit that last changed it.

// quietTenants returns the quiet tenants among those of a revision, from
// the hashes of their manifests, each one's own records and the queue. It
// writes nothing.
func (r *Reconciler) quietTenants(tenants []*schema.TenantDesired, applied map[string]*appliedRecord, hashes map[string]string) (map[string]bool, error) {
	var candidates []*schema.TenantDesired
	for _, td := range tenants {
		name := td.Tenant.Metadata.Name
		if prev := applied[name]; prev != nil && prev.InputHash == hashes[name] && !r.queue.busy(name) {
			candidates = append(candidates, td)
		}
	}
	quiet := make(map[string]bool, len(candidates))
	if len(candidates) == 0 {
		return quiet, nil
	}
	err := r.store.View(func(tx *backend.Tx) error {
		held, err := r.ownLocks(tx)
		if err != nil {
			return err
		}
		for _, td := range candidates {
			name := td.Tenant.Metadata.Name
			ok, err := settled(tx, name)
			if err != nil {
				return err
			}
			quiet[name] = ok && !held[name]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, td := range candidates {
		name := td.Tenant.Metadata.Name
		if quiet[name] {
			quiet[name], err = r.nothingLeft(td)
			if err != nil {
				return nil, err
			}
		}
	}
	return quiet, nil
}

// nothingLeft reports whether a tenant whose manifests are the ones
// applied has no work outside the store: no interrupted tofu run, no state
// to encrypt, nothing for the Talos plane.
func (r *Reconciler) nothingLeft(td *schema.TenantDesired) (bool, error) {
	name := td.Tenant.Metadata.Name
	if tofu.Interrupted(filepath.Join(r.opts.DataDir, "work", name)) {
		return false, nil
	}
	if r.opts.EncryptState && r.plainState(name) {
		return false, nil
	}
	t := &tenantRun{r: r, name: name, desired: td}
	want, err := t.talosWanted()
	return !want, err
}

// ownLocks returns the tenants whose state a lock of the reconciler's own
// holds (see needsRecovery).
func (r *Reconciler) ownLocks(tx *backend.Tx) (map[string]bool, error) {
	held := map[string]bool{}
	if r.opts.LockHolder == nil {
		return held, nil
	}
	locks, err := tx.Locks()
	for _, l := range locks {
		if l.Token == r.opts.LockHolder(l.State) {
			held[l.State] = true
		}
	}
	return held, err
}

// settled reports whether the tenant's stored status is that of a
// successful run: no retry, not stalled, not reconciling, not suspended
// and nothing pending, not being removed. Only the fields it needs are
// decoded.
func settled(tx *backend.Tx, name string) (bool, error) {
	var t struct {
		Metadata struct {
			DeletionTimestamp *string `json:"deletionTimestamp"`
		} `json:"metadata"`
		Status struct {
			ObservedCommit string            `json:"observedCommit"`
			Retry          *struct{}         `json:"retry"`
			Pending        *struct{}         `json:"pending"`
			Conditions     schema.Conditions `json:"conditions"`
		} `json:"status"`
	}
	err := tx.GetObject(schema.KindTenant, name, &t)
	if errors.Is(err, backend.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st := t.Status
	return t.Metadata.DeletionTimestamp == nil && st.ObservedCommit != "" && st.Retry == nil && st.Pending == nil &&
		!st.Conditions.IsTrue(schema.ConditionStalled) && !st.Conditions.IsTrue(schema.ConditionReconciling) &&
		!st.Conditions.IsTrue(schema.ConditionSuspended), nil
}
