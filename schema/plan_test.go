package schema

import "testing"

// TestPlanSummaryText: what people read of a plan counts machines apart
// from the other resources; a summary without machine counts reads as
// tofu's totals.
func TestPlanSummaryText(t *testing.T) {
	for _, c := range []struct {
		s    PlanSummary
		want string
	}{
		{PlanSummary{Add: 6, Machines: PlanCounts{Add: 5}}, "machines +5, other +1"},
		{PlanSummary{Add: 2, Machines: PlanCounts{Add: 2}}, "machines +2"},
		{PlanSummary{Add: 1, Destroy: 3, Machines: PlanCounts{Add: 1, Destroy: 1}}, "machines +1 -1, other -2"},
		{PlanSummary{Change: 1}, "+0 ~1 -0"},
		{PlanSummary{}, "+0 ~0 -0"},
	} {
		if got := c.s.Text(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.s, got, c.want)
		}
	}
}

func TestPlaneActionsString(t *testing.T) {
	for _, c := range []struct {
		a    PlaneActions
		want string
	}{
		{PlaneActions{}, ""},
		{PlaneActions{Bootstrap: "prod-cp-0"}, "bootstrap on prod-cp-0"},
		{PlaneActions{Machines: 6, Upgrades: 6}, "rollout of 6 machines (6 upgrades)"},
		{PlaneActions{Machines: 1, Configs: 1, Restarts: 1}, "rollout of 1 machine (1 config, 1 restart)"},
		{PlaneActions{Bootstrap: "cp", Machines: 2, Configs: 2, Upgrades: 2}, "bootstrap on cp, rollout of 2 machines (2 configs, 2 upgrades)"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.a, got, c.want)
		}
	}
}
