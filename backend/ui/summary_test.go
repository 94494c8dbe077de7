package ui

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// A commit written with its totals gives the same summary as one written
// without them (an older store), and is read only up to the totals.
func TestDecodeSummary(t *testing.T) {
	at := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	c := commit(sha(7), "scale workers", at, schema.CommitPartiallyFailed,
		schema.TenantResult{Tenant: "a", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 2, Change: 1}},
		schema.TenantResult{Tenant: "b", Phase: schema.CommitFailed, Plan: schema.PlanSummary{Destroy: 3}})
	c.Status.Message = "1 of 2 tenants failed"
	c.Status.Problems = []schema.Problem{{File: "x.yaml", Line: 1, Message: "bad"}}
	totals := c.Status.Sum()
	c.Status.Totals = &totals
	with, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Totals = nil
	without, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	want := commitSummary{Name: c.Metadata.Name, Spec: c.Spec, Created: at, Phase: schema.CommitPartiallyFailed,
		Plan: schema.PlanSummary{Add: 2, Change: 1, Destroy: 3}, Tenants: 2, Failed: 1, Problems: 1, Message: "1 of 2 tenants failed"}
	for name, obj := range map[string][]byte{"with totals": with, "without totals": without} {
		got, err := decodeSummary(obj)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	// Past the totals nothing is read: a commit whose results would not
	// decode still has its summary.
	i := strings.Index(string(with), `"tenants":[`)
	if i < 0 {
		t.Fatalf("no tenants in %s", with)
	}
	broken := string(with[:i]) + `"tenants":[{"phase":42}]}}`
	if _, err := decodeSummary([]byte(broken)); err != nil {
		t.Errorf("a commit with totals was decoded past them: %v", err)
	}
	if _, err := decodeSummary([]byte(strings.Replace(broken, `"totals"`, `"other"`, 1))); err == nil {
		t.Error("a commit without totals whose results do not decode gave a summary")
	}
}
