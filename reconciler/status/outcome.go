package status

import (
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Outcome is what a run of a tenant records in its status: the
// conditions Reconciling and Stalled, the message, the retry and the
// maintenance wait. Make one with Applying, Destroying, InPlane, Applied,
// Retrying, Waiting or Stalled; Record writes it into a status, and
// Compute then derives Ready from it.
type Outcome struct {
	reconciling schema.ConditionStatus
	stalled     schema.ConditionStatus
	reason      string
	message     string
	generation  int64
	// keepFailure leaves message and retry as they are: a run in progress
	// does not yet change what the last failure said.
	keepFailure bool
	failure     string
	retry       *schema.RetryStatus
	maintenance *schema.MaintenanceStatus
}

// Applying: a run applies the tenant's revision rev.
func Applying(rev string, gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionTrue, stalled: schema.ConditionFalse, reason: schema.ReasonApplying,
		message: "applying revision " + short(rev), generation: gen, keepFailure: true}
}

// Destroying: a run destroys a tenant that left git.
func Destroying(gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionTrue, stalled: schema.ConditionFalse, reason: schema.ReasonDestroying,
		message: "destroying the tenant, which left git", generation: gen, keepFailure: true}
}

// Applied: the run applied revision rev.
func Applied(rev string, gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionFalse, stalled: schema.ConditionFalse, reason: schema.ReasonApplied,
		message: "revision " + short(rev) + " applied", generation: gen}
}

// InPlane: tofu applied revision rev, and the run goes on in the Talos
// plane, which bootstraps the tenant and rolls the revision through its
// machines; its end records the next outcome (Applied, Retrying, ...).
func InPlane(rev string, gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionTrue, stalled: schema.ConditionFalse, reason: schema.ReasonApplying,
		message: "applying revision " + short(rev) + ": tofu applied it; the Talos plane bootstraps and configures the machines", generation: gen}
}

// Retrying: the run failed for reason, saying msg, and runs again as
// retry says.
func Retrying(reason, msg string, retry schema.RetryStatus, gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionTrue, stalled: schema.ConditionFalse, reason: schema.ReasonRetryScheduled,
		message: fmt.Sprintf("attempt %d failed (%s); the next one starts at %s", retry.Attempts, reason,
			retry.NextAttemptAt.UTC().Format(time.RFC3339)),
		generation: gen, failure: msg, retry: &retry}
}

// Waiting: the run applied what it could; what waits for the maintenance
// window that opens at next, and msg says so in a sentence.
func Waiting(what, msg string, next time.Time, gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionTrue, stalled: schema.ConditionFalse, reason: schema.ReasonWaitingForMaintenanceWindow,
		message: msg, generation: gen, maintenance: &schema.MaintenanceStatus{Waiting: what, NextWindow: next}}
}

// Stalled: the run failed for reason, saying msg, and only a new commit
// can help.
func Stalled(reason, msg string, gen int64) Outcome {
	return Outcome{reconciling: schema.ConditionFalse, stalled: schema.ConditionTrue, reason: reason,
		message: msg, generation: gen, failure: msg}
}

// Record writes the outcome into st; now is the time of any condition
// whose status changes.
func (o Outcome) Record(st *schema.TenantStatus, now time.Time) {
	if st.Conditions.Get(schema.ConditionReady) == nil {
		// Ready comes first in the list, as kubectl users expect; Compute
		// gives it its status.
		st.Conditions = st.Conditions.Set(schema.Condition{Type: schema.ConditionReady, Status: schema.ConditionUnknown,
			Reason: schema.ReasonProgressing}, now)
	}
	st.Conditions = st.Conditions.Set(schema.Condition{Type: schema.ConditionReconciling, Status: o.reconciling,
		Reason: o.reason, Message: o.message, ObservedGeneration: o.generation}, now)
	stalledMsg := ""
	if o.stalled == schema.ConditionTrue {
		stalledMsg = o.message
	}
	st.Conditions = st.Conditions.Set(schema.Condition{Type: schema.ConditionStalled, Status: o.stalled,
		Reason: o.reason, Message: stalledMsg, ObservedGeneration: o.generation}, now)
	if !o.keepFailure {
		st.Message, st.Retry, st.Maintenance = o.failure, o.retry, o.maintenance
	}
}
