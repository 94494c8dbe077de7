package test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReconcileRemoveTenant removes one tenant's manifests: its machines,
// node groups and the tenant itself go, the other tenant stays as it was.
func TestReconcileRemoveTenant(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	production := e2eMachineIDs(s.machines("rezuscloud.io/tenant=production"))

	e.work.Remove("clusters/staging")
	sha := e.push("Remove tenant staging")
	c := s.waitApplied(sha)
	if c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("phase %s, want Succeeded: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	if r := e2eResult(t, c, "staging"); r.Phase != schema.CommitSucceeded || r.Plan != (schema.PlanSummary{Destroy: 2 + e2eSecretsResources, Machines: schema.PlanCounts{Destroy: 2}}) {
		t.Errorf("staging result %s %s (%s), want Succeeded -%d", r.Phase, r.Plan, r.Error, 2+e2eSecretsResources)
	}
	if r := e2eResult(t, c, "production"); r.Plan != (schema.PlanSummary{}) {
		t.Errorf("production plan %s, want no change", r.Plan)
	}

	if ms := s.machines("rezuscloud.io/tenant=staging"); len(ms) != 0 {
		t.Errorf("%d staging machines left: %v", len(ms), e2eMachineIDs(ms))
	}
	if code := s.Get("/api/v1/tenants/staging", nil); code != http.StatusNotFound {
		t.Errorf("GET /api/v1/tenants/staging: %d, want 404", code)
	}
	var ngs struct {
		Total int `json:"total"`
	}
	if code := s.Get("/api/v1/tenants/staging/node-groups", &ngs); code == http.StatusOK && ngs.Total != 0 {
		t.Errorf("staging still has %d node groups", ngs.Total)
	}
	if diff := cmp.Diff(production, e2eMachineIDs(s.machines("rezuscloud.io/tenant=production"))); diff != "" {
		t.Errorf("production machines changed (-before +after):\n%s", diff)
	}
	st := s.status()
	if st.Counts.Tenants != 1 || st.Counts.Machines != 5 || st.Counts.NodeGroups != 2 {
		t.Errorf("counts %+v: want 1 tenant, 2 node groups, 5 machines", st.Counts)
	}

	// The tenant can come back: new machines, new uids.
	e.copyExamples()
	back := e.push("Bring staging back")
	c = s.waitApplied(back)
	if r := e2eResult(t, c, "staging"); c.Status.Phase != schema.CommitSucceeded || r.Plan != (schema.PlanSummary{Add: 2 + e2eSecretsResources, Machines: schema.PlanCounts{Add: 2}}) {
		t.Fatalf("staging back: phase %s, staging %s %s", c.Status.Phase, r.Phase, r.Plan)
	}
	if n := len(s.tenantMachines("staging")); n != 2 {
		t.Errorf("staging back with %d machines, want 2", n)
	}
}

// TestReconcileMassDeletionGuard removes every tenant in one commit: the
// server refuses and names the trailer that allows it; a commit with that
// trailer then removes them.
func TestReconcileMassDeletionGuard(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := e2eMachineIDs(s.machines(""))
	runs := s.tofuRuns()

	e.work.Remove("clusters/production")
	e.work.Remove("clusters/staging")
	sha := e.push("Remove every tenant")
	c := s.WaitCommit(sha)
	if c.Status.Phase != schema.CommitFailed {
		t.Fatalf("phase %s, want Failed: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	if !strings.Contains(c.Status.Message, `"Rezuscloud-Allow-Deletions: 2"`) {
		t.Errorf("message %q does not name the trailer \"Rezuscloud-Allow-Deletions: 2\"", c.Status.Message)
	}
	for _, tenant := range []string{"production", "staging"} {
		if r := e2eResult(t, c, tenant); r.Phase != schema.CommitFailed || !strings.Contains(r.Error, "Rezuscloud-Allow-Deletions") {
			t.Errorf("tenant %s: %s %q, want Failed naming the trailer", tenant, r.Phase, r.Error)
		}
	}
	st := s.status()
	if *st.Reconciler.TofuRuns != runs {
		t.Errorf("the refused commit ran tofu: %d runs, were %d", *st.Reconciler.TofuRuns, runs)
	}
	if st.Reconciler.LastAppliedCommit != e.first {
		t.Errorf("last applied commit %s, want still %s", st.Reconciler.LastAppliedCommit, e.first)
	}
	if diff := cmp.Diff(before, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("the refused commit changed machines (-before +after):\n%s", diff)
	}
	for _, tenant := range []string{"production", "staging"} {
		var tn schema.Tenant
		if code := s.Get("/api/v1/tenants/"+tenant, &tn); code != http.StatusOK || tn.Metadata.DeletionTimestamp != nil {
			t.Errorf("tenant %s: %d, deletionTimestamp %v: want it served and not deleting", tenant, code, tn.Metadata.DeletionTimestamp)
		}
	}

	// The same tree again, with the trailer: both go.
	allowed := e.push("Remove every tenant\n\nRezuscloud-Allow-Deletions: 2\n")
	c = s.waitApplied(allowed)
	if c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("with the trailer: phase %s: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	for tenant, n := range map[string]int{"production": 5, "staging": 2} {
		if r := e2eResult(t, c, tenant); r.Plan != (schema.PlanSummary{Destroy: n + e2eSecretsResources, Machines: schema.PlanCounts{Destroy: n}}) {
			t.Errorf("tenant %s plan %s, want -%d", tenant, r.Plan, n+e2eSecretsResources)
		}
		if code := s.Get("/api/v1/tenants/"+tenant, nil); code != http.StatusNotFound {
			t.Errorf("GET /api/v1/tenants/%s: %d, want 404", tenant, code)
		}
	}
	if ms := s.machines(""); len(ms) != 0 {
		t.Errorf("%d machines left, want none", len(ms))
	}
	if st := s.status(); st.Counts.Tenants != 0 || st.Counts.Machines != 0 || st.Counts.NodeGroups != 0 {
		t.Errorf("counts %+v: want no tenants, node groups or machines", st.Counts)
	}
}

// TestReconcileDeletionProtection removes a tenant whose manifest carries
// rezuscloud.io/deletion-protection: "true": the commit fails with a
// message that says how to lift it, and the machines stay. Doing what the
// message says removes the tenant.
func TestReconcileDeletionProtection(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	const tenantFile = "clusters/staging/tenant.yaml"
	protect := func(value string) {
		e.edit(tenantFile, "  labels:\n    environment: staging\n",
			"  labels:\n    environment: staging\n  annotations:\n    rezuscloud.io/deletion-protection: \""+value+"\"\n")
	}
	protect("true")
	protected := e.push("Protect staging")
	if c := s.waitApplied(protected); c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("protect: phase %s", c.Status.Phase)
	}
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &tn)
	if tn.Metadata.Annotations["rezuscloud.io/deletion-protection"] != "true" {
		t.Fatalf("tenant staging annotations %v: want the protection", tn.Metadata.Annotations)
	}
	staging := e2eMachineIDs(s.machines("rezuscloud.io/tenant=staging"))
	runs := s.tofuRuns()

	e.work.Remove("clusters/staging")
	sha := e.push("Remove staging")
	c := s.WaitCommit(sha)
	if c.Status.Phase == schema.CommitSucceeded {
		t.Fatalf("removing a protected tenant succeeded: %s", e2eBrief(c.Status))
	}
	r := e2eResult(t, c, "staging")
	if r.Phase != schema.CommitFailed || !strings.Contains(r.Error, `rezuscloud.io/deletion-protection: "false"`) {
		t.Errorf("staging result %s %q: want Failed with how to lift the protection", r.Phase, r.Error)
	}
	if r := e2eResult(t, c, "production"); r.Phase != schema.CommitSucceeded {
		t.Errorf("production %s, want Succeeded: a protected tenant must not hold others back", r.Phase)
	}
	if got := s.tofuRuns(); got != runs {
		t.Errorf("refusing to destroy ran tofu: %d runs, were %d", got, runs)
	}
	if diff := cmp.Diff(staging, e2eMachineIDs(s.machines("rezuscloud.io/tenant=staging"))); diff != "" {
		t.Errorf("protected machines changed (-before +after):\n%s", diff)
	}
	if code := s.Get("/api/v1/tenants/staging", nil); code != http.StatusOK {
		t.Errorf("GET /api/v1/tenants/staging: %d, want 200", code)
	}

	// Lift the protection as the message says, then remove the tenant.
	e.copyExamples()
	protect("false")
	lifted := e.push("Lift staging's protection")
	if c := s.waitApplied(lifted); c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("lift: phase %s: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	if diff := cmp.Diff(staging, e2eMachineIDs(s.machines("rezuscloud.io/tenant=staging"))); diff != "" {
		t.Errorf("restoring the manifest changed machines (-before +after):\n%s", diff)
	}
	e.work.Remove("clusters/staging")
	removed := e.push("Remove staging again")
	c = s.waitApplied(removed)
	if c.Status.Phase != schema.CommitSucceeded || e2eResult(t, c, "staging").Plan != (schema.PlanSummary{Destroy: 2 + e2eSecretsResources, Machines: schema.PlanCounts{Destroy: 2}}) {
		t.Fatalf("remove after lifting: phase %s, tenants %s", c.Status.Phase, e2eBrief(c.Status))
	}
	if code := s.Get("/api/v1/tenants/staging", nil); code != http.StatusNotFound {
		t.Errorf("GET /api/v1/tenants/staging: %d, want 404", code)
	}
}

// TestReconcileManifestPathGone pushes a commit without the manifests
// directory at all: that is an error of the source, never a deletion.
func TestReconcileManifestPathGone(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	before := e2eMachineIDs(s.machines(""))
	runs := s.tofuRuns()

	e.work.Run("mv", "clusters", "cluster")
	e.push("Rename the manifests directory by mistake")
	s.WaitFor("the source to report the missing path", func() bool {
		return strings.Contains(s.status().Source.LastError, "clusters")
	})
	st := s.status()
	if st.Reconciler.LastAppliedCommit != e.first || *st.Reconciler.TofuRuns != runs {
		t.Errorf("reconciler %+v after the path vanished: want %s still applied and %d tofu runs", st.Reconciler, e.first, runs)
	}
	if diff := cmp.Diff(before, e2eMachineIDs(s.machines(""))); diff != "" {
		t.Errorf("machines changed (-before +after):\n%s", diff)
	}
	if st.Counts.Tenants != 2 {
		t.Errorf("%d tenants, want 2", st.Counts.Tenants)
	}
}
