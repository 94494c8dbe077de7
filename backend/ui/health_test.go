package ui

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestCondMeaning: every condition type's good state is green or grey,
// its bad state red, work under way amber, a suspension blue.
func TestCondMeaning(t *testing.T) {
	for _, c := range []struct {
		typ    string
		status schema.ConditionStatus
		reason string
		want   string
	}{
		{schema.ConditionReady, schema.ConditionTrue, schema.ReasonApplied, meaningGood},
		{schema.ConditionReady, schema.ConditionFalse, schema.ReasonMachinesNotReady, meaningBusy},
		{schema.ConditionReady, schema.ConditionFalse, schema.ReasonTofuFailed, meaningBad},
		{schema.ConditionReady, schema.ConditionUnknown, schema.ReasonProgressing, meaningBusy},
		{schema.ConditionReady, schema.ConditionUnknown, "", meaningUnknown},
		{schema.ConditionReady, schema.ConditionFalse, schema.ReasonSuperseded, meaningIdle},
		{schema.ConditionStalled, schema.ConditionFalse, "", meaningGood},
		{schema.ConditionStalled, schema.ConditionTrue, schema.ReasonInvalidManifests, meaningBad},
		{schema.ConditionDrifted, schema.ConditionFalse, schema.ReasonNoDrift, meaningGood},
		{schema.ConditionDrifted, schema.ConditionTrue, schema.ReasonInfrastructureDrifted, meaningBad},
		{schema.ConditionSuspended, schema.ConditionFalse, "", meaningIdle},
		{schema.ConditionSuspended, schema.ConditionTrue, schema.ReasonSuspended, meaningHeld},
		{schema.ConditionReconciling, schema.ConditionFalse, "", meaningIdle},
		{schema.ConditionReconciling, schema.ConditionTrue, schema.ReasonRetryScheduled, meaningBusy},
		{schema.ConditionUpgrading, schema.ConditionFalse, "UpToDate", meaningIdle},
		{schema.ConditionUpgrading, schema.ConditionTrue, "RollingOut", meaningBusy},
		{schema.ConditionUpgrading, schema.ConditionFalse, schema.ReasonRolloutFailed, meaningBad},
		{schema.ConditionBackupFailed, schema.ConditionFalse, "", meaningGood},
		{schema.ConditionBackupFailed, schema.ConditionTrue, schema.ReasonBackupFailed, meaningBad},
	} {
		if got := condMeaning(schema.Condition{Type: c.typ, Status: c.status, Reason: c.reason}); got != c.want {
			t.Errorf("%s %s (%s): %s, want %s", c.typ, c.status, c.reason, got, c.want)
		}
	}
}

// TestConditionBadges: the tenant page colours each condition by what it
// means (Stalled, Upgrading and Reconciling False are no errors), and the
// overview has a health column that names what is wrong or under way.
func TestConditionBadges(t *testing.T) {
	r := filled(t, rigOptions{})
	objs := fleet("shop", 1, 1)
	tn := objs[0].(*schema.Tenant)
	tn.Status.Conditions = schema.Conditions{
		{Type: schema.ConditionReady, Status: schema.ConditionTrue, Reason: schema.ReasonApplied},
		{Type: schema.ConditionReconciling, Status: schema.ConditionFalse},
		{Type: schema.ConditionStalled, Status: schema.ConditionFalse},
		{Type: schema.ConditionUpgrading, Status: schema.ConditionTrue, Reason: "RollingOut", Message: "machine 2 of 2"},
		{Type: schema.ConditionDrifted, Status: schema.ConditionFalse, Reason: schema.ReasonNoDrift},
	}
	r.put(objs...)
	page := body(t, r.do("GET", "/tenants/shop", nil, ""), 200)
	row := regexp.MustCompile(`<tr><td>(\w+)</td><td><span class="badge ([\w-]+)">(\w+)</span>`)
	var got []string
	for _, m := range row.FindAllStringSubmatch(page, -1) {
		got = append(got, fmt.Sprintf("%s %s %s", m[1], m[3], m[2]))
	}
	want := "Ready True cond-good,Reconciling False cond-idle,Stalled False cond-good,Upgrading True cond-busy,Drifted False cond-good"
	if strings.Join(got, ",") != want {
		t.Errorf("condition badges %q, want %q", strings.Join(got, ","), want)
	}
	contains(t, "tenant status", page, `<span class="badge cond-good" title="Applied">ready</span>`,
		`<span class="badge cond-busy" title="RollingOut: machine 2 of 2">upgrading</span>`)

	overview := body(t, r.do("GET", "/", nil, ""), 200)
	contains(t, "overview", overview, "<th>Health</th>",
		`<td class="badges"><span class="badge cond-good" title="Applied">ready</span> <span class="badge cond-busy" title="RollingOut: machine 2 of 2">upgrading</span> </td>`,
		// staging has only the ready flag, false.
		`<td class="badges"><span class="badge cond-bad">not ready</span> </td>`,
		`<ul class="legend" aria-label="Colours of the recent commits">`, `<span class="swatch phase-failed"></span>failed or invalid`)
}

func TestCondWord(t *testing.T) {
	for typ, want := range map[string]string{schema.ConditionStalled: "stalled", schema.ConditionBackupFailed: "backup failed", "": ""} {
		if got := condWord(typ); got != want {
			t.Errorf("condWord(%q) = %q, want %q", typ, got, want)
		}
	}
}
