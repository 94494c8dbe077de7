// Package status owns the status of tenants, node groups and machines:
// it computes it, and it is the one code that stores it.
//
// Its functions compute and are pure. Compute derives a tenant's phase,
// machine counts, readiness flags and condition Ready, and its node
// groups', from what is declared, the machines that exist and what the
// runs recorded. An Outcome is what a run records (the conditions
// Reconciling and Stalled, the message, the retry, the maintenance wait).
// Machine is a machine's status after a probe; Upgrading and
// Rollout.Status follow a rollout's progress; Drifted is a drift check's
// condition; Commit sets a commit's conditions and totals.
//
// Recorder stores them (record.go): each of its methods records, in a
// store transaction, what happened (a run's outcome, what it applied, a
// removal, a drift check's finding, a suspension, what the Talos plane
// observed) and writes the status that follows from it and from what is
// stored. The reconciler's runs and drift checks and the plane's observer
// write status only through it, and internal/layering's TestStatusOwner
// fails when other code stores a Tenant, NodeGroup, Machine or
// ConfigPatch, or when other code of the reconciler makes or sets a
// condition. Commits are the reconciler's own records: it stores them,
// with the conditions Commit computes.
//
// Who owns what: a run of the reconciler records its outcome; Compute
// computes everything else from that and the machines; the plane's
// observer records the machines' status, the Kubernetes API's readiness
// and the Upgrading condition. The package imports the store and schema,
// and nothing of the reconciler or its plane.
package status

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Tenant is what the status of one tenant is computed from.
type Tenant struct {
	// Status is the tenant's status as stored. What the runs set in it is
	// kept: phase removing, the observed commit, the message, the retry
	// and the conditions Reconciling and Stalled. The rest is computed
	// anew.
	Status schema.TenantStatus
	// Generation is the tenant's metadata.generation.
	Generation int64
	// NodeGroups are the tenant's node groups as applied: their count and
	// role, and their status as stored (for its conditions' times).
	NodeGroups []*schema.NodeGroup
	// Machines are the machines that exist, with their observed status.
	Machines []*schema.Machine
	// APIAnswers: an observation says that the Kubernetes API answers.
	APIAnswers bool
}

// Computed is the status of a tenant and of each of its node groups, by
// node group name.
type Computed struct {
	Tenant     schema.TenantStatus
	NodeGroups map[string]schema.NodeGroupStatus
}

// Compute returns the status of the tenant in, and of its node groups;
// now is the time of any condition whose status changes.
func Compute(in Tenant, now time.Time) Computed {
	groups := map[string]*schema.MachineCounts{}
	for _, ng := range in.NodeGroups {
		groups[ng.Metadata.Name] = &schema.MachineCounts{Desired: ng.Spec.Count}
	}
	var total schema.MachineCounts
	for _, ng := range in.NodeGroups {
		total.Desired += ng.Spec.Count
	}
	for _, m := range in.Machines {
		count(&total, m)
		if c := groups[m.Spec.NodeGroup]; c != nil {
			count(c, m)
		}
	}

	st := in.Status
	st.Conditions = slices.Clone(st.Conditions) // Set changes in place; the caller's stays as it was
	st.Machines = total
	st.Available = total.Total == total.Desired
	st.Ready = total.Desired > 0 && total.Ready == total.Desired
	st.ControlPlaneReady = total.ControlPlane > 0 && total.ControlPlaneReady == total.ControlPlane
	st.APIReady = in.APIAnswers && total.ControlPlane > 0
	st.Phase = phase(st)
	st.Conditions = st.Conditions.Set(tenantReady(st, in.Generation), now)

	out := Computed{Tenant: st, NodeGroups: map[string]schema.NodeGroupStatus{}}
	for _, ng := range in.NodeGroups {
		c := *groups[ng.Metadata.Name]
		gs := schema.NodeGroupStatus{Machines: c, Message: ng.Status.Message, Conditions: slices.Clone(ng.Status.Conditions)}
		gs.Conditions = gs.Conditions.Set(groupReady(c), now)
		out.NodeGroups[ng.Metadata.Name] = gs
	}
	return out
}

func count(c *schema.MachineCounts, m *schema.Machine) {
	c.Total++
	// A machine whose Node has been NotReady too long is not ready
	// (nodeVerdict), whatever its stage.
	ready := m.Status.Stage == schema.StageReady && (m.Status.Kubernetes == nil || m.Status.Ready)
	if ready {
		c.Ready++
	}
	if m.Status.Kubernetes != nil && m.Status.Kubernetes.Ready {
		c.NodesReady++
	}
	if m.Spec.Role == schema.RoleControlPlane {
		c.ControlPlane++
		if ready {
			c.ControlPlaneReady++
		}
	} else {
		c.Workers++
	}
}

// phase is removing once a tenant left git; forming until it is first
// applied and while a machine it asks for is missing or not in stage
// ready: forming becomes active when every expected machine reports
// ready, and active becomes forming again when a node group grows or a
// machine's stage drops below ready. It is shrinking while there are more
// machines than the node groups ask for.
func phase(st schema.TenantStatus) schema.TenantPhase {
	m := st.Machines
	switch {
	case st.Phase == schema.TenantRemoving:
		return schema.TenantRemoving
	case st.ObservedCommit == "" || m.Total < m.Desired:
		return schema.TenantForming
	case m.Total > m.Desired:
		return schema.TenantShrinking
	case m.Ready < m.Desired:
		return schema.TenantForming
	}
	return schema.TenantActive
}

// tenantReady is the Ready condition: what the last run says first, then
// the machines.
func tenantReady(st schema.TenantStatus, gen int64) schema.Condition {
	c := schema.Condition{Type: schema.ConditionReady, ObservedGeneration: gen}
	rec := st.Conditions.Get(schema.ConditionReconciling)
	m := st.Machines
	switch stalled := st.Conditions.Get(schema.ConditionStalled); {
	case stalled != nil && stalled.Status == schema.ConditionTrue:
		c.Status, c.Reason, c.Message = schema.ConditionFalse, stalled.Reason, stalled.Message
	case rec != nil && rec.Status == schema.ConditionTrue && rec.Reason != schema.ReasonRetryScheduled && rec.Reason != schema.ReasonWaitingForMaintenanceWindow:
		c.Status, c.Reason, c.Message = schema.ConditionUnknown, schema.ReasonProgressing, rec.Message
	case st.Retry != nil:
		c.Status, c.Reason, c.Message = schema.ConditionFalse, st.Retry.LastReason, st.Message
	case st.Phase == schema.TenantRemoving:
		c.Status, c.Reason, c.Message = schema.ConditionFalse, schema.ReasonDestroying, "the tenant left git and is being destroyed"
	case st.ObservedCommit == "":
		c.Status, c.Reason, c.Message = schema.ConditionUnknown, schema.ReasonProgressing, "not applied yet"
	case st.Ready:
		c.Status, c.Reason = schema.ConditionTrue, schema.ReasonApplied
		c.Message = fmt.Sprintf("revision %s applied; %d of %d machines ready", short(st.ObservedCommit), m.Ready, m.Desired)
	default:
		c.Status, c.Reason = schema.ConditionFalse, schema.ReasonMachinesNotReady
		c.Message = fmt.Sprintf("revision %s applied; %d of %d machines ready", short(st.ObservedCommit), m.Ready, m.Desired)
	}
	return c
}

func groupReady(c schema.MachineCounts) schema.Condition {
	cond := schema.Condition{Type: schema.ConditionReady, Status: schema.ConditionTrue, Reason: schema.ReasonApplied,
		Message: fmt.Sprintf("%d of %d machines ready", c.Ready, c.Desired)}
	if c.Total != c.Desired || c.Ready != c.Desired {
		cond.Status, cond.Reason = schema.ConditionFalse, schema.ReasonMachinesNotReady
		cond.Message = fmt.Sprintf("%d of %d machines exist, %d ready", c.Total, c.Desired, c.Ready)
	}
	return cond
}

// short is a revision as people read it: 12 characters; a directory's
// content hash loses its "sha256:" too, as the CLI shows it.
func short(rev string) string {
	rev = strings.TrimPrefix(rev, "sha256:")
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
