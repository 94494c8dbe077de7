package schema

import (
	"testing"
	"time"
)

// TestEffectiveDrain: the defaults, the tenant's fields over them, and a
// node group's fields over the tenant's, each field on its own.
func TestEffectiveDrain(t *testing.T) {
	no, yes := false, true
	for _, c := range []struct {
		name          string
		tenant, group *DrainPolicy
		want          Drain
	}{
		{"defaults", nil, nil, Drain{Timeout: 10 * time.Minute, IgnoreDaemonSets: true}},
		{"tenant", &DrainPolicy{Timeout: "2m", OnTimeout: "force", DeleteEmptyDirData: &yes}, nil,
			Drain{Timeout: 2 * time.Minute, IgnoreDaemonSets: true, DeleteEmptyDirData: true, Force: true}},
		{"group over tenant, field by field", &DrainPolicy{Timeout: "2m", OnTimeout: "force", OnUnreachable: "proceed"},
			&DrainPolicy{OnTimeout: "stop", IgnoreDaemonSets: &no},
			Drain{Timeout: 2 * time.Minute, Proceed: true}},
	} {
		if got := EffectiveDrain(c.tenant, c.group); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
