package schema

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestTenantResultsEncodeAsReflection: the results encode into the bytes
// encoding/json gives for a plain []TenantResult, alone and inside a
// Commit, for every field set and unset, text that needs escaping, and
// times in other zones; and they decode back to what was encoded.
func TestTenantResultsEncodeAsReflection(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 13, 54, 123456789, time.UTC)
	zone := time.FixedZone("x", 5*3600+30*60)
	rs := TenantResults{
		{Tenant: "t0001", Phase: CommitSucceeded, StartedAt: at, FinishedAt: at},
		{Tenant: "t0002", Phase: CommitPending},
		{Tenant: "t0003", Phase: CommitFailed, Plan: PlanSummary{Add: 3, Change: -1, Destroy: 12, Machines: PlanCounts{Add: 2, Destroy: 7}},
			Plane:  &PlaneActions{Bootstrap: "cp-<0>", Machines: 3, Configs: 1, Upgrades: 2},
			Error:  "tofu apply: exit status 1\n\"quoted\" <b>&amp;</b> \\ \t\u2028\u2029 ü \x00 \xff\xfe end",
			Reason: ReasonStoreError, Stalled: true, NextAttemptAt: at.In(zone), Waiting: "window <mon>",
			OutputTail: "Error: \x1b[31mred\x1b[0m\r\n", StartedAt: at.Add(-time.Second), FinishedAt: at.In(zone)},
		{Tenant: "t0004", Phase: CommitApplying, StartedAt: at.Round(time.Second), Plane: &PlaneActions{}},
		{},
	}
	got, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal([]TenantResult(rs))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("results encode as\n%s\nwant\n%s", got, want)
	}
	var back TenantResults
	if err := json.Unmarshal(got, &back); err != nil || len(back) != len(rs) || !back[2].FinishedAt.Equal(rs[2].FinishedAt) {
		t.Errorf("decoded back: %v %+v", err, back)
	}
	again, _ := json.Marshal(back)
	if plain, _ := json.Marshal([]TenantResult(back)); !bytes.Equal(again, plain) {
		t.Errorf("decoded and encoded again:\n%s\nwant\n%s", again, plain)
	}
	for _, v := range []TenantResults{nil, {}} {
		c := Commit{Status: CommitStatus{Phase: CommitPlanning, Tenants: v}}
		got, _ := json.Marshal(c.Status)
		if bytes.Contains(got, []byte("tenants")) {
			t.Errorf("empty results are not left out: %s", got)
		}
		if b, _ := json.Marshal(TenantResults(nil)); string(b) != "null" {
			t.Errorf("nil results encode as %s", b)
		}
	}
	c := &Commit{APIVersion: APIVersion, Kind: KindCommit, Metadata: ObjectMeta{Name: "c"}, Status: CommitStatus{Phase: CommitSucceeded, Tenants: rs}}
	whole, _ := json.Marshal(c)
	if !bytes.Contains(whole, append(append([]byte(`"tenants":`), want...), ',')) {
		t.Errorf("a Commit does not hold the results as encoding/json encodes them:\n%s", whole)
	}
}
