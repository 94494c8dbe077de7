package test

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestDriftE2E runs the server with --drift-interval 300ms and --report
// github against a fake GitHub. A staging machine deleted from the sim
// cloud behind tofu's back makes staging Drifted in the API, sets
// rezuscloud_tenant_drifted{tenant="staging"} to 1, and gets a failure
// status under rezuscloud/e2e/staging/drift on the applied commit, while
// production's drift status is success. Under the default policy, detect,
// the machine stays gone.
func TestDriftE2E(t *testing.T) {
	const token = "ghp_e2eForgeToken0123456789abcdef"
	forge := newFakeForge(t, "acme", "infra", token)
	e := newE2EAt(t, "acme/infra.git", e2eOptions{
		args: []string{"--report", "github", "--github-api-url", forge.srv.URL, "--instance", forgeInstance, "--drift-interval", "300ms"},
		env:  []string{"REZUSCLOUD_GITHUB_TOKEN=" + token},
	})
	s := e.srv
	forge.waitFinal(e.first, "rezuscloud/e2e/production/drift", "success")

	st, err := sim.Open(filepath.Clean(e.data) + "-sim")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var gone string
	for _, rec := range recs {
		if rec.Tenant == "staging" && rec.NodeGroup == "workers" {
			gone = rec.ID
		}
	}
	if gone == "" {
		t.Fatal("no staging worker in the sim cloud")
	}
	if err := st.Delete(gone); err != nil {
		t.Fatal(err)
	}

	got := forge.waitFinal(e.first, "rezuscloud/e2e/staging/drift", "failure")
	if !strings.Contains(got.Description, "rezussim_machine.ng_workers[0] was deleted") {
		t.Errorf("drift status %q does not name the deleted machine", got.Description)
	}
	var tn schema.Tenant
	s.mustGet("/api/v1/tenants/staging", &tn)
	if c := tn.Status.Conditions.Get(schema.ConditionDrifted); c == nil || c.Status != schema.ConditionTrue || c.Reason != schema.ReasonInfrastructureDrifted {
		t.Errorf("staging conditions %+v: want Drifted True", tn.Status.Conditions)
	}
	_, metrics := s.Request(http.MethodGet, "/metrics", nil, nil)
	if !regexp.MustCompile(`(?m)^rezuscloud_tenant_drifted\{tenant="staging"\} 1$`).Match(metrics) ||
		!regexp.MustCompile(`(?m)^rezuscloud_tenant_drifted\{tenant="production"\} 0$`).Match(metrics) {
		t.Errorf("/metrics:\n%s", grepLines(metrics, "drifted"))
	}
	if !regexp.MustCompile(`msg="tenant drifted" .*tenant=staging .*drift="rezussim_machine.ng_workers\[0\] was deleted"`).MatchString(s.Log()) {
		t.Error("the log has no line for the drift")
	}
	if _, err := st.Get(gone); err == nil {
		t.Error("under detect, the deleted machine came back")
	}
}
