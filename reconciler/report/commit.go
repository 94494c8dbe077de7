package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// StatusesFor returns the statuses of commit c at its current phase, as
// instance reports them: first the commit as a whole under
// CommitContext(instance), then one per tenant result under
// TenantContext(instance, tenant), in the order of c.Status.Tenants. An
// Invalid commit has only the first, a failure naming the first problem
// (file:line: message) and how many there are. A preview commit
// (c.Spec.Preview) is worded as a plan: "would add 2, change 1, destroy 0".
// targetURL is set on every status as given.
//
// A tenant has a status once it has a result in c.Status.Tenants; give it a
// result in phase Pending, Planning or Applying to report it before it
// finishes. Every description is one line of at most MaxDescription
// characters.
func StatusesFor(instance string, c *schema.Commit, targetURL string) []Status {
	if c == nil {
		return nil
	}
	sha := c.Spec.SHA
	out := make([]Status, 0, 1+len(c.Status.Tenants))
	state, desc := commitState(c)
	if sig := c.Status.Signature; c.Spec.Preview && sig != nil && !sig.Verified {
		desc = unverified(sig) + "; " + desc
	}
	out = append(out, Status{SHA: sha, Context: CommitContext(instance), State: state,
		Description: truncate(desc, MaxDescription), TargetURL: targetURL})
	if c.Status.Phase == schema.CommitInvalid {
		return out
	}
	for _, res := range c.Status.Tenants {
		state, desc := tenantState(res, c.Spec.Preview)
		out = append(out, Status{SHA: sha, Context: TenantContext(instance, res.Tenant), State: state,
			Description: truncate(desc, MaxDescription), TargetURL: targetURL})
	}
	return out
}

// unverified says in two words why a preview's signature would not pass.
func unverified(sig *schema.CommitSignature) string {
	if sig.Type == "" {
		return "unsigned"
	}
	return "signature not trusted"
}

// commitState is the state and description of a commit as a whole.
func commitState(c *schema.Commit) (State, string) {
	preview := c.Spec.Preview
	tenants := c.Status.Tenants
	switch c.Status.Phase {
	case schema.CommitValidating:
		return StatePending, "validating manifests"
	case schema.CommitInvalid:
		probs := c.Status.Problems
		switch len(probs) {
		case 0:
			return StateFailure, "invalid: " + cmp.Or(firstLine(c.Status.Message), "the manifests do not validate")
		case 1:
			return StateFailure, "invalid: " + probs[0].String()
		}
		return StateFailure, "invalid (" + strconv.Itoa(len(probs)) + " problems): " + probs[0].String()
	case schema.CommitPlanning:
		if preview {
			return StatePending, "planning preview" + ofTenants(len(tenants))
		}
		return StatePending, "planning" + ofTenants(len(tenants))
	case schema.CommitApplying:
		if preview {
			return StatePending, "planning preview" + ofTenants(len(tenants))
		}
		return StateRunning, "applying" + ofTenants(len(tenants))
	case schema.CommitSucceeded:
		active := slices.DeleteFunc(slices.Clone(tenants), suspendedResult)
		switch n := len(tenants) - len(active); {
		case n == 0:
			return succeededState(tenants, preview)
		case len(active) == 0:
			return StateSuccess, plural(n, "tenant") + " suspended: the changes wait"
		default:
			state, desc := succeededState(active, preview)
			return state, desc + "; " + plural(n, "tenant") + " suspended"
		}
	case schema.CommitFailed, schema.CommitPartiallyFailed:
		verb := "failed"
		if preview {
			verb = "plan failed"
		}
		failed := 0
		var first *schema.TenantResult
		for i, res := range tenants {
			if res.Phase == schema.CommitFailed || res.Phase == schema.CommitPartiallyFailed {
				failed++
				if first == nil {
					first = &tenants[i]
				}
			}
		}
		if first == nil {
			return StateFailure, verb + ": " + cmp.Or(firstLine(c.Status.Message), "no tenant result")
		}
		return StateFailure, fmt.Sprintf("%s: %d of %d: %s: %s", verb, failed, len(tenants), first.Tenant,
			cmp.Or(firstLine(first.Error), "no error message"))
	case schema.CommitSuperseded:
		return StateError, "superseded by a newer revision before it ran: nothing applied"
	}
	return StatePending, "queued"
}

// succeededState describes a commit whose tenants all succeeded.
func succeededState(tenants []schema.TenantResult, preview bool) (State, string) {
	var sum schema.PlanSummary
	for _, res := range tenants {
		sum = sum.Plus(res.Plan)
	}
	switch {
	case len(tenants) == 0:
		return StateSuccess, "no tenants"
	case preview && sum == (schema.PlanSummary{}):
		return StateSuccess, "no changes in " + plural(len(tenants), "tenant")
	case preview:
		return StateSuccess, wouldChange(sum) + " in " + plural(len(tenants), "tenant")
	case sum == (schema.PlanSummary{}):
		return StateSuccess, plural(len(tenants), "tenant") + " up to date"
	}
	return StateSuccess, "applied " + plural(len(tenants), "tenant") + ": " + sum.Text()
}

// suspendedResult reports whether a result is a suspended tenant's, whose
// changes wait (see the Suspended condition).
func suspendedResult(res schema.TenantResult) bool { return res.Reason == schema.ReasonSuspended }

// tenantState is the state and description of one tenant's result.
func tenantState(res schema.TenantResult, preview bool) (State, string) {
	switch res.Phase {
	case schema.CommitPlanning:
		return StatePending, "planning"
	case schema.CommitApplying:
		if preview {
			return StatePending, "planning"
		}
		return StateRunning, "applying"
	case schema.CommitSucceeded:
		switch {
		case res.Reason == schema.ReasonSuspended:
			return StateSuccess, "suspended: the changes wait until it is resumed"
		case res.Plan == (schema.PlanSummary{}):
			return StateSuccess, "no changes"
		case preview:
			return StateSuccess, wouldChange(res.Plan)
		}
		return StateSuccess, "applied: " + res.Plan.Text()
	case schema.CommitFailed, schema.CommitPartiallyFailed, schema.CommitInvalid:
		verb := "failed"
		if preview {
			verb = "plan failed"
		}
		if line := firstLine(res.Error); line != "" {
			return StateFailure, verb + ": " + line
		}
		return StateFailure, verb
	case schema.CommitSuperseded:
		if line := firstLine(res.Error); strings.HasPrefix(line, "superseded") {
			return StateError, line
		}
		return StateError, "superseded by a newer revision"
	}
	return StatePending, "queued"
}

func wouldChange(s schema.PlanSummary) string {
	return fmt.Sprintf("would add %d, change %d, destroy %d", s.Add, s.Change, s.Destroy)
}

func ofTenants(n int) string {
	if n == 0 {
		return ""
	}
	return " " + plural(n, "tenant")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
