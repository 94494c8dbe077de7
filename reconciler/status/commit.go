package status

import (
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Commit sets the conditions of a commit from its phase and its tenants'
// results: Ready (every tenant applied), Reconciling (the commit is being
// handled, or a tenant of it waits for a retry) and Stalled (it failed,
// and only a new commit helps). now is the time of any condition whose
// status changes. It sets the commit's totals too.
func Commit(st *schema.CommitStatus, now time.Time) {
	totals := st.Sum()
	st.Totals = &totals
	ready := schema.Condition{Type: schema.ConditionReady}
	rec := schema.Condition{Type: schema.ConditionReconciling, Status: schema.ConditionFalse}
	stalled := schema.Condition{Type: schema.ConditionStalled, Status: schema.ConditionFalse}
	var retrying, stalledTenants, failed, waiting []string
	var next time.Time
	for _, r := range st.Tenants {
		if r.Waiting != "" {
			waiting = append(waiting, r.Tenant+": "+r.Waiting)
		}
		if r.Phase != schema.CommitFailed {
			continue
		}
		failed = append(failed, r.Tenant)
		switch {
		case r.Stalled:
			stalledTenants = append(stalledTenants, r.Tenant)
		case !r.NextAttemptAt.IsZero():
			retrying = append(retrying, r.Tenant)
			if next.IsZero() || r.NextAttemptAt.Before(next) {
				next = r.NextAttemptAt
			}
		}
	}
	switch st.Phase {
	case schema.CommitSucceeded:
		ready.Status, ready.Reason, ready.Message = schema.ConditionTrue, schema.ReasonSucceeded, "every tenant applied"
	case schema.CommitInvalid:
		ready.Status, ready.Reason, ready.Message = schema.ConditionFalse, schema.ReasonInvalidManifests, st.Message
		stalled.Status, stalled.Message = schema.ConditionTrue, st.Message
	case schema.CommitSuperseded:
		ready.Status, ready.Reason, ready.Message = schema.ConditionFalse, schema.ReasonSuperseded, "newer revisions reached every tenant first"
	case schema.CommitFailed, schema.CommitPartiallyFailed:
		ready.Status, ready.Reason = schema.ConditionFalse, string(st.Phase)
		ready.Message = fmt.Sprintf("failed: %s", strings.Join(failed, ", "))
		if st.Message != "" {
			ready.Message = st.Message
		}
		if len(failed) > 0 && len(stalledTenants) == len(failed) {
			stalled.Status, stalled.Message = schema.ConditionTrue, ready.Message
		}
		if sig := st.Signature; sig != nil && sig.Refused {
			ready.Reason = schema.ReasonUnverifiedSignature
			stalled.Status, stalled.Message = schema.ConditionTrue, ready.Message
		}
		if a := st.Ancestry; a != nil && a.Refused {
			ready.Reason = schema.ReasonNonFastForward
			stalled.Status, stalled.Message = schema.ConditionTrue, ready.Message
		}
	default: // in progress
		ready.Status, ready.Reason, ready.Message = schema.ConditionUnknown, schema.ReasonProgressing, strings.ToLower(string(st.Phase))
		rec.Status, rec.Reason, rec.Message = schema.ConditionTrue, schema.ReasonProgressing, strings.ToLower(string(st.Phase))
	}
	if len(retrying) > 0 && rec.Status == schema.ConditionFalse {
		rec.Status, rec.Reason = schema.ConditionTrue, schema.ReasonRetryScheduled
		rec.Message = fmt.Sprintf("%s run again by themselves; the next at %s", strings.Join(retrying, ", "), next.UTC().Format(time.RFC3339))
	}
	if len(waiting) > 0 && rec.Status == schema.ConditionFalse {
		rec.Status, rec.Reason, rec.Message = schema.ConditionTrue, schema.ReasonWaitingForMaintenanceWindow, strings.Join(waiting, "; ")
	}
	if rec.Reason == "" {
		rec.Reason = ready.Reason
	}
	if stalled.Reason = ready.Reason; stalled.Status == schema.ConditionFalse {
		stalled.Message = ""
	}
	st.Conditions = st.Conditions.Set(ready, now).Set(rec, now).Set(stalled, now)
}
