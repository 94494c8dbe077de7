package status

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// TestHistoryOfRollingUpgrade: as the observer records a rolling upgrade
// of two machines, one after the other, the history holds each machine's
// stages in order with their times, a reboot mark for each restart, the
// tenant's availability as it dips and recovers, and the rollout's start
// and end; probes that find nothing new add nothing.
func TestHistoryOfRollingUpgrade(t *testing.T) {
	st := openStore(t)
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	record(t, st, t0, func(r Recorder) error {
		if _, err := r.tx.PutObject(schema.KindTenant, "alpha", storetest.Tenant("alpha", "prod", 1)); err != nil {
			return err
		}
		ng := storetest.NodeGroup("alpha", "w", schema.RoleWorker, 2, 2)
		if _, err := r.tx.PutObject(schema.KindNodeGroup, nodeGroupKey("alpha", "w"), ng); err != nil {
			return err
		}
		for _, id := range []string{"m-w1", "m-w2"} {
			m := storetest.Machine(id, "alpha", "w", schema.RoleWorker, "small", 4)
			m.Status = schema.MachineStatus{}
			if _, err := r.tx.PutObject(schema.KindMachine, id, m); err != nil {
				return err
			}
		}
		return nil
	})
	probe := func(stage schema.MachineStage, ready bool, config string) Probe {
		return Probe{Connected: true, Stage: stage, Ready: ready, ConfigSHA256: config, Want: "new", Address: "127.0.0.2"}
	}
	steps := []struct {
		machine string
		p       Probe
		rollout bool
	}{
		{"m-w1", probe(schema.StageReady, true, "old"), false},
		{"m-w2", probe(schema.StageReady, true, "old"), true},
		{"m-w1", probe(schema.StageRestarting, false, "old"), true},
		{"m-w1", probe(schema.StageRestarting, false, "old"), true}, // nothing new
		{"m-w1", probe(schema.StageReady, true, "new"), true},
		{"m-w2", probe(schema.StageRestarting, false, "old"), true},
		{"m-w2", probe(schema.StageReady, true, "new"), false},
	}
	for i, s := range steps {
		now := t0.Add(time.Duration(i+1) * time.Minute)
		s.p.At = now
		_, err := WriteChanged(st, now, func(r Recorder) (bool, error) {
			c1, err := r.MachineObserved(s.machine, s.p)
			if err != nil {
				return false, err
			}
			c2, err := r.TenantObserved("alpha", Observation{APIAnswers: true, Rollout: Rollout{Tenant: "alpha", Active: s.rollout}})
			return c1 || c2, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	at := func(i int) time.Time { return t0.Add(time.Duration(i+1) * time.Minute) }
	tr := func(i int, stage schema.MachineStage, ready, fresh bool) schema.MachineTransition {
		return schema.MachineTransition{At: at(i), Stage: stage, Ready: ready, Connected: true, ConfigUpToDate: fresh}
	}
	var h schema.TenantHistory
	if err := st.View(func(tx store.Tx) (err error) {
		h, err = history.Tenant(tx, "alpha", history.Query{Since: t0})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := []schema.MachineTimeline{
		{Machine: "m-w1", Transitions: []schema.MachineTransition{tr(0, schema.StageReady, true, false), tr(2, schema.StageRestarting, false, false), tr(4, schema.StageReady, true, true)}},
		{Machine: "m-w2", Transitions: []schema.MachineTransition{tr(1, schema.StageReady, true, false), tr(5, schema.StageRestarting, false, false), tr(6, schema.StageReady, true, true)}},
	}
	if diff := cmp.Diff(want, h.Machines); diff != "" {
		t.Errorf("machine timelines (-want +got):\n%s", diff)
	}
	var kinds []string
	for _, m := range h.Marks {
		kinds = append(kinds, m.At.Sub(t0).String()+" "+m.Kind+" "+m.Machine)
	}
	wantMarks := []string{"2m0s rolloutStarted ", "3m0s reboot m-w1", "6m0s reboot m-w2", "7m0s rolloutFinished "}
	if diff := cmp.Diff(wantMarks, kinds); diff != "" {
		t.Errorf("marks (-want +got):\n%s", diff)
	}
	var ready []int
	for _, a := range h.Availability {
		ready = append(ready, a.Ready)
	}
	if diff := cmp.Diff([]int{1, 2, 1, 2, 1, 2}, ready); diff != "" {
		t.Errorf("ready machines over time (-want +got):\n%s", diff)
	}
}
