package reconciler

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// A revision's tenants fall in two sets. Those it changed (or that have
// something left to do) are queued and run applySteps. The others are
// quiet: their manifests hash to what was last applied to them, their last
// run ended well and left nothing behind, and no job of theirs waits or
// runs. A quiet tenant gets its result in the Commit at once, and nothing
// of it is written: its records (the Tenant's status.observedCommit among
// them) stay those of the commit that last changed it.

// quietTenants returns the quiet tenants among those of a revision, from
// the hashes of their manifests, each one's records as the index has them,
// the state locks and the queue. It writes nothing.
func (r *Reconciler) quietTenants(tenants []*schema.TenantDesired, applied map[string]*appliedRecord, hashes map[string]string) (map[string]bool, error) {
	var candidates []*schema.TenantDesired
	var names []string
	for _, td := range tenants {
		name := td.Tenant.Metadata.Name
		if prev := applied[name]; prev != nil && prev.InputHash == hashes[name] && !r.queue.busy(name) {
			candidates = append(candidates, td)
			names = append(names, name)
		}
	}
	if len(candidates) == 0 {
		return map[string]bool{}, nil
	}
	var held map[string]bool
	err := r.store.View(func(tx store.Tx) (err error) {
		held, err = r.ownLocks(tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	quiet := r.index.isSettled(names)
	for name := range quiet {
		quiet[name] = quiet[name] && !held[name]
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
	if r.runner.Interrupted(filepath.Join(r.opts.DataDir, "work", name)) {
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
func (r *Reconciler) ownLocks(tx store.Tx) (map[string]bool, error) {
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

// settledStatus reports whether a Tenant stored as data has the status of
// a successful run: no retry, not stalled, not reconciling, not suspended
// and nothing pending, not being removed. Only the fields it needs are
// decoded; a record that does not decode is not settled.
func settledStatus(data []byte) bool {
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
	if err := json.Unmarshal(data, &t); err != nil {
		return false
	}
	st := t.Status
	return t.Metadata.DeletionTimestamp == nil && st.ObservedCommit != "" && st.Retry == nil && st.Pending == nil &&
		!st.Conditions.IsTrue(schema.ConditionStalled) && !st.Conditions.IsTrue(schema.ConditionReconciling) &&
		!st.Conditions.IsTrue(schema.ConditionSuspended)
}

// inputHashes remembers the input hash of each tenant's manifests by the
// objects they were loaded into. The manifest cache hands out the same
// objects for files whose content did not change, and nobody modifies
// them, so a tenant made of the same objects as before has the same hash
// without encoding its manifests again.
type inputHashes struct {
	mu       sync.Mutex
	byTenant map[string]hashedInputs
}

type hashedInputs struct {
	tenant  *schema.Tenant
	groups  []*schema.NodeGroup
	patches []*schema.ConfigPatch
	hash    string
}

// of returns the input hash of every tenant of desired (see inputHash
// for key), by name. It forgets the tenants desired does not have once
// they are many.
func (ih *inputHashes) of(desired *schema.Desired, key []byte) map[string]string {
	ih.mu.Lock()
	defer ih.mu.Unlock()
	if ih.byTenant == nil || len(ih.byTenant) > 2*len(desired.Tenants)+64 {
		ih.byTenant = make(map[string]hashedInputs, len(desired.Tenants))
	}
	out := make(map[string]string, len(desired.Tenants))
	for _, td := range desired.Tenants {
		name := td.Tenant.Metadata.Name
		prev, ok := ih.byTenant[name]
		if !ok || prev.tenant != td.Tenant || !slices.Equal(prev.groups, td.NodeGroups) || !slices.Equal(prev.patches, td.Patches) {
			prev = hashedInputs{tenant: td.Tenant, groups: td.NodeGroups, patches: td.Patches, hash: inputHash(td, key)}
			ih.byTenant[name] = prev
		}
		out[name] = prev.hash
	}
	return out
}
