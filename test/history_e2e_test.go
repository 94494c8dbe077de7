package test

import (
	"slices"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestHistoryOfRollingUpgrade: the real server records the history of a
// Talos upgrade rolled through a tenant: the API's tenant history marks
// the rollout's start and end and a reboot of every machine, each
// machine's timeline goes through restarting and back to ready in order,
// the machines' gauges are sampled, and all of it is there after a
// restart of the server.
func TestHistoryOfRollingUpgrade(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs("--history-sample-interval", "1s")})
	planeWaitReady(t, e, "production")
	before := time.Now().UTC()
	sha := planeBump(e, "1.12.7")
	e.srv.waitApplied(sha)
	planeWaitReady(t, e, "production")
	machines := e.srv.tenantMachines("production")
	var h schema.TenantHistory
	e.srv.WaitFor("the rollout's end in the history", func() bool {
		e.srv.mustGet("/api/v1/tenants/production/history?since=1h", &h)
		return slices.ContainsFunc(h.Marks, func(m schema.HistoryMark) bool { return m.Kind == schema.MarkRolloutFinished })
	})
	checkRolloutHistory(t, h, machines, before)
	var mh schema.MachineHistory
	e.srv.WaitFor("a sample of "+machines[0].Metadata.Name, func() bool {
		e.srv.mustGet("/api/v1/tenants/production/machines/"+machines[0].Metadata.Name+"/history?since=1h", &mh)
		return len(mh.Samples) > 0
	})
	if s := mh.Samples[0]; s.MemoryTotalBytes == 0 || s.MemoryUsedBytes == 0 || s.MemoryUsedBytes > s.MemoryTotalBytes {
		t.Errorf("sample %+v: want memory used within its total", s)
	}
	e.srv.Stop()
	e.srv.Start()
	var again schema.TenantHistory
	e.srv.mustGet("/api/v1/tenants/production/history?since=1h", &again)
	checkRolloutHistory(t, again, machines, before)
}

// checkRolloutHistory fails t unless h marks the rollout's start after
// before, a reboot of each machine and the rollout's end, in that order,
// and each machine's timeline enters restarting after before and is ready
// after it.
func checkRolloutHistory(t *testing.T, h schema.TenantHistory, machines []schema.Machine, before time.Time) {
	t.Helper()
	var kinds []string
	rebooted := map[string]bool{}
	for _, m := range h.Marks {
		if m.At.Before(before) {
			continue
		}
		if m.Kind == schema.MarkReboot {
			rebooted[m.Machine] = true
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != m.Kind {
			kinds = append(kinds, m.Kind)
		}
	}
	if len(kinds) < 3 || kinds[0] != schema.MarkRolloutStarted || kinds[len(kinds)-1] != schema.MarkRolloutFinished {
		t.Errorf("marks since the bump: %v; want the rollout's start, reboots, its end", kinds)
	}
	for _, m := range machines {
		if !rebooted[m.Metadata.Name] {
			t.Errorf("no reboot mark of %s: %+v", m.Metadata.Name, h.Marks)
		}
		i := slices.IndexFunc(h.Machines, func(tl schema.MachineTimeline) bool { return tl.Machine == m.Metadata.Name })
		if i < 0 {
			t.Errorf("no timeline of %s", m.Metadata.Name)
			continue
		}
		var stages []schema.MachineStage
		for _, tr := range h.Machines[i].Transitions {
			if !tr.At.Before(before) && (len(stages) == 0 || stages[len(stages)-1] != tr.Stage) {
				stages = append(stages, tr.Stage)
			}
		}
		r := slices.Index(stages, schema.StageRestarting)
		if r < 0 || stages[len(stages)-1] != schema.StageReady {
			t.Errorf("%s's stages since the bump: %v; want restarting, then ready at the end", m.Metadata.Name, stages)
		}
	}
}
