package test

import (
	"os"
	"path/filepath"
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

// TestHistoryRetentionAcrossRestarts: the server downsamples and drops
// history as its flags say, in the pass it makes when it starts: on a test
// clock, a machine's gauges of one hour become one hourly sample once that
// hour is older than --history-full while the next hour keeps its
// minutes, and the whole first day is gone once it is older than
// --history-keep.
func TestHistoryRetentionAcrossRestarts(t *testing.T) {
	clock := filepath.Join(t.TempDir(), "clock")
	setClock := func(at time.Time) {
		t.Helper()
		if err := os.WriteFile(clock, []byte(at.Format(time.RFC3339)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	day0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	setClock(day0.Add(10 * time.Hour))
	e := newE2E(t, e2eOptions{env: []string{"REZUSCLOUD_TEST_CLOCK_FILE=" + clock},
		args: planeArgs("--history-sample-interval", "1s", "--history-full", "24h", "--history-step", "1h", "--history-keep", "48h")})
	planeWaitReady(t, e, "production")
	m := e.srv.tenantMachines("production")[0].Metadata.Name
	path := "/api/v1/tenants/production/machines/" + m + "/history?since=" + day0.Format(time.RFC3339) +
		"&until=" + day0.Add(24*time.Hour).Format(time.RFC3339)
	var h schema.MachineHistory
	sampledAfter := func(at time.Time) func() bool {
		return func() bool {
			e.srv.mustGet(path, &h)
			return len(h.Samples) > 0 && !h.Samples[len(h.Samples)-1].At.Before(at)
		}
	}
	e.srv.WaitFor("a sample at 10:00", sampledAfter(day0.Add(10*time.Hour)))
	setClock(day0.Add(11*time.Hour + 5*time.Minute))
	e.srv.WaitFor("a sample at 11:05", sampledAfter(day0.Add(11*time.Hour+5*time.Minute)))
	if h.Step != 60 || len(h.Transitions) == 0 {
		t.Fatalf("history on the first day: step %d, %d transitions; want 60 and some", h.Step, len(h.Transitions))
	}

	e.srv.Stop()
	setClock(day0.Add(35*time.Hour + 30*time.Minute)) // 10:00-11:00 of day 0 is past --history-full, 11:00-12:00 not
	e.srv.Start()
	e.srv.WaitFor("10:00-11:00 downsampled", func() bool {
		e.srv.mustGet(path, &h)
		return h.Step == 3600 && len(h.Samples) > 0 && h.Samples[0].At.Equal(day0.Add(10*time.Hour))
	})
	if len(h.Samples) < 2 || h.Samples[1].At.Before(day0.Add(11*time.Hour+5*time.Minute)) || h.Samples[0].MemoryTotalBytes == 0 {
		t.Fatalf("samples after downsampling %+v; want one at 10:00, then those from 11:05 at full resolution", h.Samples)
	}

	e.srv.Stop()
	setClock(day0.Add(72*time.Hour + 30*time.Minute)) // day 0 is past --history-keep
	e.srv.Start()
	e.srv.WaitFor("day 0 dropped", func() bool {
		e.srv.mustGet(path, &h)
		return len(h.Samples) == 0 && len(h.Transitions) == 0
	})
}
