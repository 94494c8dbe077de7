package test

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestKubernetesVersionSkew: with staging at Kubernetes 1.33 (Talos 1.12
// supports 1.30 to 1.35), a commit that upgrades it to 1.35 is refused,
// as Kubernetes's version skew policy refuses it: the tenant stalls with
// InvalidManifests at the field's file:line, and its machines are left
// alone. An upgrade to 1.34 is applied.
func TestKubernetesVersionSkew(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	path := e2eManifests + "/staging/tenant.yaml"
	e.edit(path, `kubernetesVersion: "1.34.1"`, `kubernetesVersion: "1.33.5"`)
	e.srv.waitApplied(e.push("Staging: Kubernetes 1.33"))
	machines := e2eMachineIDs(e.srv.tenantMachines("staging"))
	e.edit(path, `kubernetesVersion: "1.33.5"`, `kubernetesVersion: "1.35.0"`)
	sha := e.push("Staging: Kubernetes 1.35")
	c := waitFinished(e.srv, sha, time.Time{})
	r := e2eResult(t, c, "staging")
	if r.Phase != schema.CommitFailed || !strings.Contains(r.Error, "clusters/staging/tenant.yaml:12: kubernetesVersion 1.35.0 skips 1.34: the cluster runs 1.33.5") {
		t.Fatalf("staging in the commit that skips 1.34: %s %q", r.Phase, r.Error)
	}
	var tn schema.Tenant
	e.srv.mustGet("/api/v1/tenants/staging", &tn)
	if st := tn.Status.Conditions.Get(schema.ConditionStalled); st == nil || st.Status != schema.ConditionTrue || st.Reason != schema.ReasonInvalidManifests {
		t.Errorf("staging's Stalled condition: %+v, want True with InvalidManifests", st)
	}
	e2eSameIDs(t, "after the refused upgrade", machines, e2eMachineIDs(e.srv.tenantMachines("staging")))

	e.edit(path, `kubernetesVersion: "1.35.0"`, `kubernetesVersion: "1.34.1"`)
	e.srv.waitApplied(e.push("Staging: Kubernetes 1.34"))
}
