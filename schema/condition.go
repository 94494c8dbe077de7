package schema

import (
	"slices"
	"time"
)

// Condition is one Kubernetes-style observation about an object, as
// status.conditions[] lists them: what is true of it, since when, and why.
type Condition struct {
	// Type names the aspect, such as Ready or Stalled (see the Condition*
	// constants).
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status ConditionStatus `json:"status"`
	// Reason is a one-word CamelCase cause, for machines to match on.
	Reason string `json:"reason,omitempty"`
	// Message says the same for people, in a sentence.
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when Status last changed; a new reason or
	// message alone does not move it.
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	// ObservedGeneration is the generation of the object (for a tenant, its
	// observed commit's sequence) the condition was computed for, where one
	// applies.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ConditionStatus is the status of a Condition.
type ConditionStatus string

// Condition statuses.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// Condition types of tenants, node groups and commits.
const (
	// ConditionReady: the object is as its manifests declare and healthy.
	ConditionReady = "Ready"
	// ConditionReconciling: work toward the declared state is in progress
	// or waits for a retry.
	ConditionReconciling = "Reconciling"
	// ConditionStalled: the object cannot make progress until a new commit
	// changes something; retrying would not help.
	ConditionStalled = "Stalled"
	// ConditionDrifted: the real infrastructure differs from what was
	// applied.
	ConditionDrifted = "Drifted"
	// ConditionSuspended: reconciliation is paused by annotation.
	ConditionSuspended = "Suspended"
	// ConditionUpgrading: a rolling change of the machines is in progress.
	ConditionUpgrading = "Upgrading"
	// ConditionBackupFailed: the last backup of the tenant's etcd failed
	// (status.backup.lastError says why); the next success clears it.
	ConditionBackupFailed = "BackupFailed"
)

// Conditions is an object's status.conditions list, kept in a stable order
// (by type, in the order first set).
type Conditions []Condition

// Get returns the condition of type t, or nil.
func (cs Conditions) Get(t string) *Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// IsTrue reports whether the condition of type t is present and True.
func (cs Conditions) IsTrue(t string) bool {
	c := cs.Get(t)
	return c != nil && c.Status == ConditionTrue
}

// Set records c, replacing the condition of the same type. The
// LastTransitionTime moves to now only when the status changes (or the
// condition is new); a changed reason or message keeps it. It returns the
// updated list.
func (cs Conditions) Set(c Condition, now time.Time) Conditions {
	if old := cs.Get(c.Type); old != nil {
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status || c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		*old = c
		return cs
	}
	c.LastTransitionTime = now
	return append(cs, c)
}

// Remove drops the condition of type t.
func (cs Conditions) Remove(t string) Conditions {
	return slices.DeleteFunc(cs, func(c Condition) bool { return c.Type == t })
}

// Condition reasons, every one of them: the reasons of tenants', node
// groups' and commits' conditions live here and nowhere else. A reason is
// one CamelCase word that clients match on; the condition's message says
// the same for people.
const (
	// ReasonApplying: a run applies the tenant's newest revision: tofu
	// runs, or the Talos plane bootstraps and rolls it through the
	// machines.
	ReasonApplying = "Applying"
	// ReasonDestroying: tofu destroys a tenant that left git.
	ReasonDestroying = "Destroying"
	// ReasonApplied: the newest revision is applied.
	ReasonApplied = "Applied"
	// ReasonProgressing: work is in progress; Ready is Unknown meanwhile.
	ReasonProgressing = "Progressing"
	// ReasonMachinesNotReady: applied, but not every machine is ready yet.
	ReasonMachinesNotReady = "MachinesNotReady"
	// ReasonSuspended: the tenant's suspend annotation holds back every
	// change (the Suspended condition).
	ReasonSuspended = "Suspended"
	// ReasonRetryScheduled: a run failed for a passing reason and runs
	// again by itself (see RetryStatus).
	ReasonRetryScheduled = "RetryScheduled"

	// Reasons of a run that stalled: only a new commit helps.

	// ReasonInvalidManifests: the manifests do not validate or render.
	ReasonInvalidManifests = "InvalidManifests"
	// ReasonDeletionBlocked: the commit would destroy more tenants than
	// --max-deletions allows without the Rezuscloud-Allow-Deletions trailer.
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonDeletionProtected: the tenant left git but has deletion
	// protection.
	ReasonDeletionProtected = "DeletionProtected"
	// ReasonReplaceBlocked: the plan would replace control-plane machines
	// and the commit has no Rezuscloud-Allow-Replace trailer for the tenant.
	ReasonReplaceBlocked = "ReplaceBlocked"
	// ReasonRolloutFailed: a machine did not come back from a change the
	// Talos plane rolled through the tenant; the rollout stopped there.
	ReasonRolloutFailed = "RolloutFailed"
	// ReasonDrainTimeout: a rollout stopped before disrupting a machine
	// whose Kubernetes node did not drain within its timeout (onTimeout:
	// stop), or whose pods the drain policy does not let it evict.
	ReasonDrainTimeout = "DrainTimeout"
	// ReasonUnverifiedSignature: --verify-signatures refused the commit,
	// unsigned or not signed by a trusted key.
	ReasonUnverifiedSignature = "UnverifiedSignature"
	// ReasonNonFastForward: --verify-signatures refused the commit because
	// it does not descend from the last commit applied (a force push back
	// to an older signed commit, a history rewrite).
	ReasonNonFastForward = "NonFastForward"
	// ReasonProviderClassDisabled: a node group of the tenant has a
	// provider class this server does not run (providerClass sim on a
	// server without --sim-cloud); nothing of the tenant is applied.
	ReasonProviderClassDisabled = "ProviderClassDisabled"

	// Reasons of a run that is retried.

	// ReasonStateLocked: someone else holds the lock of the tenant's state.
	ReasonStateLocked = "StateLocked"
	// ReasonTofuFailed: a tofu command failed (a provider or cloud API
	// error, mostly).
	ReasonTofuFailed = "TofuFailed"
	// ReasonStateBackendError: the state backend could not be read or
	// written.
	ReasonStateBackendError = "StateBackendError"
	// ReasonStoreError: the server's own store or data dir failed.
	ReasonStoreError = "StoreError"
	// ReasonWaitingForMachines: the Talos plane waits for machines or etcd
	// to be ready (a bootstrap, a rollout's health gates).
	ReasonWaitingForMachines = "WaitingForMachines"
	// ReasonWaitingForMaintenanceWindow: disruptive work of the tenant
	// waits for one of its maintenance windows to open (see
	// MaintenanceStatus); the rest of the commit is applied.
	ReasonWaitingForMaintenanceWindow = "WaitingForMaintenanceWindow"
	// ReasonDeprecatedAPIsRequested: an upgrade of the tenant's
	// Kubernetes waits because clients still request APIs that the new
	// release removes (the API server's apiserver_requested_deprecated_apis
	// names them). It goes on once the API servers no longer count a
	// request of them, which they do from their last restart.
	ReasonDeprecatedAPIsRequested = "DeprecatedAPIsRequested"
	// ReasonFailed: a failure of no more specific kind.
	ReasonFailed = "Failed"

	// Reasons of a commit's Ready condition.

	// ReasonSucceeded: every tenant of the commit succeeded.
	ReasonSucceeded = "Succeeded"
	// ReasonPartiallyFailed: some tenants failed, others succeeded.
	ReasonPartiallyFailed = "PartiallyFailed"
	// ReasonSuperseded: newer revisions reached every tenant first.
	ReasonSuperseded = "Superseded"

	// Reasons of the Drifted condition.

	// ReasonInfrastructureDrifted: a drift check found resources or
	// machine configs that differ from what was applied.
	ReasonInfrastructureDrifted = "InfrastructureDrifted"
	// ReasonNoDrift: the last drift check found everything as applied.
	ReasonNoDrift = "NoDrift"

	// Reasons of the Upgrading condition (RolloutFailed above when a
	// rollout stopped).

	// ReasonRollingOut: the Talos plane changes machines one at a time.
	ReasonRollingOut = "RollingOut"
	// ReasonUpToDate: every machine runs what its node group declares.
	ReasonUpToDate = "UpToDate"

	// Reasons of backups and restores.

	// ReasonBackupFailed: a backup of the tenant's etcd failed; it is
	// retried with backoff (the BackupFailed condition).
	ReasonBackupFailed = "BackupFailed"
	// ReasonRestoreNotAllowed: the commit sets or changes spec.restore
	// without the Rezuscloud-Allow-Restore trailer for the tenant; the
	// tenant stalls until a commit carries it.
	ReasonRestoreNotAllowed = "RestoreNotAllowed"
	// ReasonRestoreFailed: a restore of the tenant's etcd from a backup
	// failed (the backup does not check out, or a step of the restore).
	ReasonRestoreFailed = "RestoreFailed"
)
