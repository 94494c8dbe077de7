package status

import "github.com/rezuscloud/rezuscloud/schema"

// Drift is what a drift check of a tenant found.
type Drift struct {
	// Revision and Generation are those last applied, which the check
	// compared the infrastructure and machines with.
	Revision   string
	Generation int64
	// Found says what drifted, in a line; "" when nothing did.
	Found string
	// Correction is what is done about it.
	Correction Correction
}

// Correction is what the reconciler does about a drift.
type Correction int

const (
	// NotCorrected: nothing; the tenant's drift policy is detect.
	NotCorrected Correction = iota
	// Correcting: the revision last applied runs again, to correct it.
	Correcting
	// CorrectionPending: a run of the tenant is pending, which corrects
	// it.
	CorrectionPending
	// CorrectionRemained: the revision ran again, and the drift remained.
	CorrectionRemained
)

// Drifted is the Drifted condition a drift check gives a tenant.
func Drifted(d Drift) schema.Condition {
	rev := shortRev(d.Revision)
	c := schema.Condition{Type: schema.ConditionDrifted, Status: schema.ConditionFalse, Reason: schema.ReasonNoDrift,
		Message: "the infrastructure and machine configs are as revision " + rev + " applied them", ObservedGeneration: d.Generation}
	if d.Found == "" {
		return c
	}
	c.Status, c.Reason, c.Message = schema.ConditionTrue, schema.ReasonInfrastructureDrifted, "drifted from revision "+rev+": "+d.Found
	switch d.Correction {
	case Correcting:
		c.Message += "; correcting: revision " + rev + " is applied again"
	case CorrectionPending:
		c.Message += "; a run of the tenant is pending, which corrects it"
	case CorrectionRemained:
		c.Message += "; revision " + rev + " was applied again and this drift remained: the configuration ignores it or tofu cannot change it"
	}
	return c
}

// shortRev is a revision in the messages of drift and suspension: its
// first 12 characters (a directory's content hash keeps its "sha256:").
func shortRev(rev string) string { return rev[:min(len(rev), 12)] }
