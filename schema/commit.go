package schema

import (
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
)

// Commit is one reconciled revision of the manifest repository and its
// outcome. The API serves it; it cannot be declared in git.
type Commit struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ObjectMeta   `json:"metadata"`
	Spec       CommitSpec   `json:"spec"`
	Status     CommitStatus `json:"status,omitzero"`
}

// CommitSpec identifies the revision. What it records of the commit is
// bounded, however large the commit: see Bounded.
type CommitSpec struct {
	SHA string `json:"sha"`
	// Ref is the ref the revision came from, at most 1 KiB.
	Ref string `json:"ref"`
	// Author is "Name <email>", at most 1 KiB.
	Author string `json:"author,omitempty"`
	// Message is the commit message's first line (at most 1 KiB) and at
	// most 64 KiB of the rest. The trailers that steer the reconciler are
	// read from the whole message, so a cut never loses them.
	Message string `json:"message,omitempty"`
	// MessageTruncated is true when the commit message was longer than
	// Message: read the whole message with git.
	MessageTruncated bool `json:"messageTruncated,omitempty"`
	// Preview is true for a plan-only run (a pull request): nothing is applied.
	Preview bool `json:"preview"`
}

// Bounded returns the spec with Message cut to its bound (setting
// MessageTruncated when it was cut), and Ref and Author cut to 1 KiB,
// ending in "…".
func (s CommitSpec) Bounded() CommitSpec {
	var cut bool
	s.Message, cut = commitmsg.Bound(s.Message)
	s.MessageTruncated = s.MessageTruncated || cut
	s.Ref, _ = commitmsg.BoundLine(s.Ref, commitmsg.MaxLine)
	s.Author, _ = commitmsg.BoundLine(s.Author, commitmsg.MaxLine)
	return s
}

// CommitPhase is where the handling of a commit, or of one tenant in it, is.
type CommitPhase string

// Commit phases. A tenant result uses Pending, Planning, Applying, Succeeded
// and Failed.
const (
	CommitPending         CommitPhase = "Pending"
	CommitValidating      CommitPhase = "Validating"
	CommitInvalid         CommitPhase = "Invalid"
	CommitPlanning        CommitPhase = "Planning"
	CommitApplying        CommitPhase = "Applying"
	CommitSucceeded       CommitPhase = "Succeeded"
	CommitFailed          CommitPhase = "Failed"
	CommitPartiallyFailed CommitPhase = "PartiallyFailed"
	// CommitSuperseded: a newer revision reached every tenant of this
	// commit before it ran, so this one applied nothing. As a tenant
	// result's phase it says the same of that tenant.
	CommitSuperseded CommitPhase = "Superseded"
)

// Done reports whether the phase is final.
func (p CommitPhase) Done() bool {
	switch p {
	case CommitInvalid, CommitSucceeded, CommitFailed, CommitPartiallyFailed, CommitSuperseded:
		return true
	}
	return false
}

// CommitStatus is the outcome of a commit.
type CommitStatus struct {
	Phase CommitPhase `json:"phase,omitempty"`
	// Message says in a line what became of the commit.
	Message string `json:"message,omitempty"`
	// Totals sum up Tenants and Problems for lists that show a commit
	// without its per-tenant detail. The reconciler sets them with every
	// write; they come before Tenants, so that a reader that needs only
	// the summary stops there instead of decoding every tenant's result.
	Totals  *CommitTotals `json:"totals,omitempty"`
	Tenants TenantResults `json:"tenants,omitempty"`
	// Problems are the validation problems of an Invalid commit.
	Problems []Problem `json:"problems,omitempty"`
	Timings  Timings   `json:"timings,omitzero"`
	// NonFastForward is true when the ref moved to a commit that does not
	// descend from the last commit applied (a force push or a history
	// rewrite); Ancestry says which commit that is and what became of it.
	NonFastForward bool `json:"nonFastForward"`
	// Ancestry is set with NonFastForward.
	Ancestry *CommitAncestry `json:"ancestry,omitempty"`
	// Conditions are Ready (every tenant applied), Reconciling (the commit
	// is being handled, or a tenant of it waits for a retry) and Stalled
	// (it failed, and only a new commit helps).
	Conditions Conditions `json:"conditions,omitempty"`
	// Signature is the outcome of the commit's signature check, when the
	// server checks signatures (--verify-signatures).
	Signature *CommitSignature `json:"signature,omitempty"`
}

// CommitTotals sum up a commit's results: how many tenants it has, how
// many failed, how many validation problems it has, and its plan totals.
type CommitTotals struct {
	Tenants  int         `json:"tenants"`
	Failed   int         `json:"failed"`
	Problems int         `json:"problems"`
	Plan     PlanSummary `json:"plan"`
}

// Sum returns the totals of st's tenants and problems.
func (st *CommitStatus) Sum() CommitTotals {
	t := CommitTotals{Tenants: len(st.Tenants), Problems: len(st.Problems)}
	for _, r := range st.Tenants {
		t.Plan = t.Plan.Plus(r.Plan)
		if r.Phase == CommitFailed {
			t.Failed++
		}
	}
	return t
}

// CommitAncestry says of a commit that does not descend from the last
// commit applied which commit that is, and whether the server refused it
// for that.
type CommitAncestry struct {
	// LastApplied is the last commit applied before this one.
	LastApplied string `json:"lastApplied"`
	// Refused is true when --verify-signatures refused the commit for it:
	// nothing of it ran.
	Refused bool `json:"refused,omitempty"`
	// Message says in a sentence why the commit was refused or let
	// through.
	Message string `json:"message,omitempty"`
}

// CommitSignature says who signed a commit, with which key, and whether
// the server trusts it. Its text fields are bounded like the commit's
// metadata.
type CommitSignature struct {
	// Type is ssh or gpg; "" for an unsigned commit.
	Type string `json:"type,omitempty"`
	// Key is the signing key's fingerprint.
	Key string `json:"key,omitempty"`
	// Signer is the trusted principal or GPG identity of the key.
	Signer string `json:"signer,omitempty"`
	// Verified: a trusted key made a valid signature.
	Verified bool `json:"verified"`
	// Refused: the commit of the main ref was not applied for want of a
	// verified signature (previews plan anyway and are never refused).
	Refused bool `json:"refused,omitempty"`
	// Reason says why the signature is not verified.
	Reason string `json:"reason,omitempty"`
}

// TenantResult is the outcome of one tenant's tofu run within a commit.
type TenantResult struct {
	Tenant string      `json:"tenant"`
	Phase  CommitPhase `json:"phase"`
	Plan   PlanSummary `json:"plan"`
	// Plane is what the Talos plane did to the tenant's machines in the
	// run, when it did something: a bootstrap, a rollout.
	Plane *PlaneActions `json:"plane,omitempty"`
	Error string        `json:"error,omitempty"`
	// Reason says why a failed tenant failed (a Reason* constant).
	Reason string `json:"reason,omitempty"`
	// Stalled says that the failure needs a new commit: the tenant is not
	// retried.
	Stalled bool `json:"stalled,omitempty"`
	// NextAttemptAt is when a failed tenant runs again by itself, or one
	// whose work waits for a maintenance window (see Waiting); zero
	// when it does not (it is stalled, or a newer revision took over).
	NextAttemptAt time.Time `json:"nextAttemptAt,omitzero"`
	// Waiting says what of the commit waits for a maintenance window of
	// the tenant; NextAttemptAt is then the window's opening.
	Waiting string `json:"waiting,omitempty"`
	// OutputTail is the last lines of tofu's output, for a failure.
	OutputTail string    `json:"outputTail,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// PlanSummary counts the resource changes of a plan, the way tofu prints
// them: a replacement counts as one add and one destroy. Machines counts
// the machines among them (cloud instances, bare-metal records); the rest
// are the other resources (the Talos secrets, ports, ...). A summary whose
// Machines is zero either changes no machine or was recorded by a server
// that did not count them apart.
type PlanSummary struct {
	Add      int        `json:"add"`
	Change   int        `json:"change"`
	Destroy  int        `json:"destroy"`
	Machines PlanCounts `json:"machines,omitzero"`
}

// PlanCounts counts the changes of one part of a plan.
type PlanCounts struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

// String formats the summary as "+add ~change -destroy".
func (s PlanSummary) String() string {
	return "+" + strconv.Itoa(s.Add) + " ~" + strconv.Itoa(s.Change) + " -" + strconv.Itoa(s.Destroy)
}

// Plus returns the sum of two summaries, machines and all.
func (s PlanSummary) Plus(o PlanSummary) PlanSummary {
	return PlanSummary{Add: s.Add + o.Add, Change: s.Change + o.Change, Destroy: s.Destroy + o.Destroy,
		Machines: PlanCounts{Add: s.Machines.Add + o.Machines.Add, Change: s.Machines.Change + o.Machines.Change,
			Destroy: s.Machines.Destroy + o.Machines.Destroy}}
}

// Other counts the changes of the resources that are not machines.
func (s PlanSummary) Other() PlanCounts {
	return PlanCounts{Add: s.Add - s.Machines.Add, Change: s.Change - s.Machines.Change, Destroy: s.Destroy - s.Machines.Destroy}
}

// Text says what the plan changes as people read it, machines apart from
// the other resources: "machines +5, other +1", "machines -2". Without
// machine counts it is String's "+1 ~0 -0".
func (s PlanSummary) Text() string {
	if s.Machines == (PlanCounts{}) {
		return s.String()
	}
	out := "machines " + s.Machines.String()
	if o := s.Other(); o != (PlanCounts{}) {
		out += ", other " + o.String()
	}
	return out
}

// String lists the counts that are not zero, "+5 -1", or says "0".
func (c PlanCounts) String() string {
	var parts []string
	for _, p := range []struct {
		sign string
		n    int
	}{{"+", c.Add}, {"~", c.Change}, {"-", c.Destroy}} {
		if p.n != 0 {
			parts = append(parts, p.sign+strconv.Itoa(p.n))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}

// PlaneActions is what the Talos plane did to a tenant's machines in one
// run, beside what tofu changed: the etcd bootstrap, and the rollout that
// changed running machines one at a time.
type PlaneActions struct {
	// Bootstrap names the control plane (its host name, else its id) on
	// which the run bootstrapped the tenant's etcd.
	Bootstrap string `json:"bootstrap,omitempty"`
	// Machines counts the machines the rollout changed; Configs, Upgrades
	// and Restarts count its operations: configs applied in place, Talos
	// upgrades, and reboots for a declared restart (rezuscloud.io/restartedAt).
	Machines int `json:"machines,omitempty"`
	Configs  int `json:"configs,omitempty"`
	Upgrades int `json:"upgrades,omitempty"`
	Restarts int `json:"restarts,omitempty"`
	// Restore is the backup from which the run restored the tenant's
	// etcd (spec.restore).
	Restore string `json:"restore,omitempty"`
}

// String says in a line what the plane did: "bootstrap on prod-cp-0",
// "rollout of 6 machines (6 upgrades)"; "" for nothing.
func (a PlaneActions) String() string {
	var parts []string
	if a.Restore != "" {
		parts = append(parts, "restore of etcd from backup "+a.Restore)
	}
	if a.Bootstrap != "" {
		parts = append(parts, "bootstrap on "+a.Bootstrap)
	}
	if a.Machines > 0 {
		var ops []string
		for _, op := range []struct {
			n          int
			one, other string
		}{{a.Configs, "config", "configs"}, {a.Upgrades, "upgrade", "upgrades"}, {a.Restarts, "restart", "restarts"}} {
			switch {
			case op.n == 1:
				ops = append(ops, "1 "+op.one)
			case op.n > 1:
				ops = append(ops, strconv.Itoa(op.n)+" "+op.other)
			}
		}
		r := "rollout of " + strconv.Itoa(a.Machines) + " machine"
		if a.Machines > 1 {
			r += "s"
		}
		if len(ops) > 0 {
			r += " (" + strings.Join(ops, ", ") + ")"
		}
		parts = append(parts, r)
	}
	return strings.Join(parts, ", ")
}

// Timings record when each step of a commit's handling happened.
type Timings struct {
	ReceivedAt  time.Time `json:"receivedAt,omitzero"`
	ValidatedAt time.Time `json:"validatedAt,omitzero"`
	PlannedAt   time.Time `json:"plannedAt,omitzero"`
	FinishedAt  time.Time `json:"finishedAt,omitzero"`
}
