package status

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/schema"
)

// suspended is the Suspended condition of a tenant whose changes p wait:
// the revision that waits and what it would change.
func suspended(p schema.PendingChanges, gen int64) schema.Condition {
	msg := fmt.Sprintf("revision %s pending: %s", shortRev(p.Revision), p.Summary)
	if p.Deletion {
		msg = fmt.Sprintf("revision %s removed the tenant from git; it is not destroyed while suspended (restore its manifest without %s: \"true\" to resume it; a later removal destroys it)",
			shortRev(p.Revision), schema.AnnotationSuspend)
	}
	return schema.Condition{Type: schema.ConditionSuspended, Status: schema.ConditionTrue, Reason: schema.ReasonSuspended,
		Message: msg, ObservedGeneration: gen}
}
