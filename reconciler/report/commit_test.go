package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
)

const testSHA = "0123456789abcdef0123456789abcdef01234567"

func commitAt(phase schema.CommitPhase, preview bool, tenants ...schema.TenantResult) *schema.Commit {
	return &schema.Commit{
		Spec:   schema.CommitSpec{SHA: testSHA, Ref: "refs/heads/main", Preview: preview},
		Status: schema.CommitStatus{Phase: phase, Tenants: tenants},
	}
}

func TestStatusesFor(t *testing.T) {
	const url = "https://rezus.example/api/v1/commits/" + testSHA
	st := func(ctx string, state State, desc string) Status {
		return Status{SHA: testSHA, Context: ctx, State: state, Description: desc, TargetURL: url}
	}
	invalid := commitAt(schema.CommitInvalid, false)
	invalid.Status.Problems = []schema.Problem{
		{File: "tenants/prod.yaml", Line: 12, Column: 3, Path: "/spec/count", Message: "must be >= 1"},
		{File: "tenants/dev.yaml", Line: 4, Message: "unknown field \"cout\""},
		{File: "tenants/dev.yaml", Line: 9, Message: "duplicate key"},
	}
	invalidOne := commitAt(schema.CommitInvalid, false)
	invalidOne.Status.Problems = invalid.Status.Problems[1:2]
	failedNoTenants := commitAt(schema.CommitFailed, false)
	failedNoTenants.Status.Message = "applied records: bbolt: database not open\nmore"

	ok := func(name string, add, change, destroy int) schema.TenantResult {
		return schema.TenantResult{Tenant: name, Phase: schema.CommitSucceeded,
			Plan: schema.PlanSummary{Add: add, Change: change, Destroy: destroy}}
	}
	tests := []struct {
		name   string
		commit *schema.Commit
		want   []Status
	}{
		{"validating", commitAt(schema.CommitValidating, false), []Status{
			st("rezuscloud/eu", StatePending, "validating manifests"),
		}},
		{"received", commitAt("", false), []Status{
			st("rezuscloud/eu", StatePending, "queued"),
		}},
		{"invalid", invalid, []Status{
			st("rezuscloud/eu", StateFailure, "invalid (3 problems): tenants/prod.yaml:12:3: /spec/count: must be >= 1"),
		}},
		{"invalid, one problem", invalidOne, []Status{
			st("rezuscloud/eu", StateFailure, `invalid: tenants/dev.yaml:4: unknown field "cout"`),
		}},
		{"planning", commitAt(schema.CommitPlanning, false), []Status{
			st("rezuscloud/eu", StatePending, "planning"),
		}},
		{"applying", commitAt(schema.CommitApplying, false,
			schema.TenantResult{Tenant: "dev", Phase: schema.CommitPending},
			schema.TenantResult{Tenant: "prod", Phase: schema.CommitApplying},
			ok("stage", 1, 0, 0)), []Status{
			st("rezuscloud/eu", StateRunning, "applying 3 tenants"),
			st("rezuscloud/eu/dev", StatePending, "queued"),
			st("rezuscloud/eu/prod", StateRunning, "applying"),
			st("rezuscloud/eu/stage", StateSuccess, "applied: +1 ~0 -0"),
		}},
		{"succeeded", commitAt(schema.CommitSucceeded, false, ok("dev", 2, 0, 1), ok("prod", 0, 0, 0)), []Status{
			st("rezuscloud/eu", StateSuccess, "applied 2 tenants: +2 ~0 -1"),
			st("rezuscloud/eu/dev", StateSuccess, "applied: +2 ~0 -1"),
			st("rezuscloud/eu/prod", StateSuccess, "no changes"),
		}},
		{"succeeded, machines apart", commitAt(schema.CommitSucceeded, false,
			schema.TenantResult{Tenant: "dev", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 6,
				Machines: schema.PlanCounts{Add: 5}}},
			schema.TenantResult{Tenant: "prod", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 1, Destroy: 1,
				Machines: schema.PlanCounts{Add: 1, Destroy: 1}}}), []Status{
			st("rezuscloud/eu", StateSuccess, "applied 2 tenants: machines +6 -1, other +1"),
			st("rezuscloud/eu/dev", StateSuccess, "applied: machines +5, other +1"),
			st("rezuscloud/eu/prod", StateSuccess, "applied: machines +1 -1"),
		}},
		{"succeeded, nothing to do", commitAt(schema.CommitSucceeded, false, ok("dev", 0, 0, 0)), []Status{
			st("rezuscloud/eu", StateSuccess, "1 tenant up to date"),
			st("rezuscloud/eu/dev", StateSuccess, "no changes"),
		}},
		{"succeeded, one suspended", commitAt(schema.CommitSucceeded, false, ok("dev", 1, 0, 0),
			schema.TenantResult{Tenant: "prod", Phase: schema.CommitSucceeded, Reason: schema.ReasonSuspended}), []Status{
			st("rezuscloud/eu", StateSuccess, "applied 1 tenant: +1 ~0 -0; 1 tenant suspended"),
			st("rezuscloud/eu/dev", StateSuccess, "applied: +1 ~0 -0"),
			st("rezuscloud/eu/prod", StateSuccess, "suspended: the changes wait until it is resumed"),
		}},
		{"succeeded, no tenants", commitAt(schema.CommitSucceeded, false), []Status{
			st("rezuscloud/eu", StateSuccess, "no tenants"),
		}},
		{"preview", commitAt(schema.CommitSucceeded, true, ok("dev", 2, 1, 0), ok("prod", 0, 0, 0)), []Status{
			st("rezuscloud/eu", StateSuccess, "would add 2, change 1, destroy 0 in 2 tenants"),
			st("rezuscloud/eu/dev", StateSuccess, "would add 2, change 1, destroy 0"),
			st("rezuscloud/eu/prod", StateSuccess, "no changes"),
		}},
		{"preview planning", commitAt(schema.CommitApplying, true,
			schema.TenantResult{Tenant: "dev", Phase: schema.CommitApplying}), []Status{
			st("rezuscloud/eu", StatePending, "planning preview 1 tenant"),
			st("rezuscloud/eu/dev", StatePending, "planning"),
		}},
		{"partially failed", commitAt(schema.CommitPartiallyFailed, false,
			ok("dev", 1, 0, 0),
			schema.TenantResult{Tenant: "prod", Phase: schema.CommitFailed,
				Error: "\ntofu apply: exit status 1\nError: creating machine: quota exceeded", OutputTail: "…"},
			schema.TenantResult{Tenant: "stage", Phase: schema.CommitSuperseded,
				Error: "superseded by revision " + strings.Repeat("f", 40) + " before it ran"}), []Status{
			st("rezuscloud/eu", StateFailure, "failed: 1 of 3: prod: tofu apply: exit status 1"),
			st("rezuscloud/eu/dev", StateSuccess, "applied: +1 ~0 -0"),
			st("rezuscloud/eu/prod", StateFailure, "failed: tofu apply: exit status 1"),
			st("rezuscloud/eu/stage", StateError, "superseded by revision "+strings.Repeat("f", 40)+" before it ran"),
		}},
		{"preview failed", commitAt(schema.CommitFailed, true,
			schema.TenantResult{Tenant: "dev", Phase: schema.CommitFailed}), []Status{
			st("rezuscloud/eu", StateFailure, "plan failed: 1 of 1: dev: no error message"),
			st("rezuscloud/eu/dev", StateFailure, "plan failed"),
		}},
		{"failed before any tenant", failedNoTenants, []Status{
			st("rezuscloud/eu", StateFailure, "failed: applied records: bbolt: database not open"),
		}},
		{"superseded", commitAt(schema.CommitSuperseded, false,
			schema.TenantResult{Tenant: "dev", Phase: schema.CommitSuperseded}), []Status{
			st("rezuscloud/eu", StateError, "superseded by a newer revision before it ran: nothing applied"),
			st("rezuscloud/eu/dev", StateError, "superseded by a newer revision"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StatusesFor("eu", tt.commit, url)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("statuses (-want +got):\n%s", diff)
			}
			for _, s := range got {
				if err := s.validate(); err != nil {
					t.Errorf("invalid status: %v", err)
				}
			}
		})
	}
	if StatusesFor("eu", nil, "") != nil {
		t.Error("a nil commit has statuses")
	}
}

func TestStatusesForLongError(t *testing.T) {
	c := commitAt(schema.CommitFailed, false, schema.TenantResult{Tenant: "prod", Phase: schema.CommitFailed,
		Error: "tofu apply: " + strings.Repeat("very long reason ", 30)})
	for _, s := range StatusesFor("eu", c, "") {
		if n := len([]rune(s.Description)); n > MaxDescription {
			t.Errorf("%s: description of %d characters", s.Context, n)
		}
		if !strings.HasSuffix(s.Description, "…") {
			t.Errorf("%s: a cut description does not say so: %q", s.Context, s.Description)
		}
	}
}

func ExampleStatusesFor() {
	c := &schema.Commit{
		Spec: schema.CommitSpec{SHA: "0123456789abcdef0123456789abcdef01234567"},
		Status: schema.CommitStatus{Phase: schema.CommitPartiallyFailed, Tenants: []schema.TenantResult{
			{Tenant: "dev", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 2, Destroy: 1}},
			{Tenant: "prod", Phase: schema.CommitFailed, Error: "tofu apply: exit status 1"},
		}},
	}
	for _, s := range StatusesFor("eu-1", c, "") {
		fmt.Printf("%s: %s %s\n", s.Context, s.State, s.Description)
	}
	// Output:
	// rezuscloud/eu-1: failure failed: 1 of 2: prod: tofu apply: exit status 1
	// rezuscloud/eu-1/dev: success applied: +2 ~0 -1
	// rezuscloud/eu-1/prod: failure failed: tofu apply: exit status 1
}
