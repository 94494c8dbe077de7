package test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestSuspendEndToEnd, through the real server binary: a scale of a
// suspended tenant is validated and recorded as pending, not applied; the
// REST API's tenant object and `rezusctl get tenants` show the Suspended
// condition with the pending revision and what it would change; the commit
// that removes the annotation applies the scale.
func TestSuspendEndToEnd(t *testing.T) {
	e := newE2E(t, e2eOptions{args: []string{"--tokens-file", crashTokens(t)}})
	s := e.srv
	path := e2eManifests + "/staging/tenant.yaml"
	annotation := "  annotations:\n    " + schema.AnnotationSuspend + ": \"true\"\n"
	e.edit(path, "  name: staging\n", "  name: staging\n"+annotation)
	e.setCount("staging", "workers", 2)
	runs := s.tofuRuns()
	sha := e.push("Suspend staging and scale its workers to 2")
	s.waitApplied(sha)
	if got := s.tofuRuns(); got != runs {
		t.Errorf("a commit that changes only a suspended tenant ran tofu %d times", got-runs)
	}
	if n := e2eCounts(s.machines(""))["staging/workers"]; n != 1 {
		t.Fatalf("suspended staging has %d workers, want 1", n)
	}
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &tn)
	cond := tn.Status.Conditions.Get(schema.ConditionSuspended)
	if p := tn.Status.Pending; p == nil || p.Revision != sha || !strings.Contains(p.Summary, "node group workers scaled 1 → 2") ||
		cond == nil || cond.Status != schema.ConditionTrue || !strings.Contains(cond.Message, sha[:12]) {
		t.Fatalf("the API's staging: pending %+v, Suspended condition %+v", tn.Status.Pending, cond)
	}
	out := rezusctl(t).run("get", "tenants", "--server", s.URL())
	if !regexp.MustCompile(`(?m)^staging .* Suspended: revision ` + sha[:12] + ` pending: node group workers scaled 1 → 2`).MatchString(out) {
		t.Errorf("rezusctl get tenants does not show staging suspended with its pending scale:\n%s", out)
	}

	e.edit(path, annotation, "")
	sha = e.push("Resume staging")
	s.waitApplied(sha)
	if n := e2eCounts(s.machines(""))["staging/workers"]; n != 2 {
		t.Errorf("resumed staging has %d workers, want 2", n)
	}
	tn = schema.Tenant{} // the JSON leaves out what is no longer set
	s.mustGet("/api/v1/tenants/staging", &tn)
	if tn.Status.Pending != nil || tn.Status.Conditions.Get(schema.ConditionSuspended) != nil || tn.Status.ObservedCommit != sha {
		t.Errorf("resumed staging: pending %+v, conditions %+v, observed %s", tn.Status.Pending, tn.Status.Conditions, tn.Status.ObservedCommit)
	}
}
