package talos

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// calls lists the write calls that machine id took, in order.
func (r *rig) calls(id string) []string {
	var out []string
	for _, e := range r.journal(id, "Upgrade", "LifecycleService.Upgrade", "Reboot") {
		out = append(out, e.Call)
	}
	return out
}

// Machines that run Talos 1.13 or later are upgraded with
// LifecycleService.Upgrade and then rebooted, one at a time, control
// planes first; the record says each got through the reboot.
func TestRollUpgradesTalos114ThroughTheLifecycleService(t *testing.T) {
	r := newRig(t)
	r.version = "v1.14.0"
	tr := r.formed("acme", 1, 2)
	rolled, err := r.plane.Roll(ctxT(t), tr.desired(tr.cpCfg, tr.wCfg, "1.14.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(rolled.Ops, map[string]int{OpUpgrade: 3}) {
		t.Fatalf("Roll says it rolled %+v, want 3 upgrades", rolled)
	}
	for _, m := range tr.ms {
		if got, want := r.calls(m.ID), []string{"LifecycleService.Upgrade", "Reboot"}; !slices.Equal(got, want) {
			t.Errorf("%s took %q, want %q", m.ID, got, want)
		}
		if info, _ := r.host.Node(m.ID); info.Version != "v1.14.1" {
			t.Errorf("%s runs %s", m.ID, info.Version)
		}
	}
	checkOneAtATime(t, tr.ops("Reboot"), testTimings.Reboot+testTimings.Boot)
	rec, _, _ := r.plane.Rollout("acme")
	if rec.Current != nil || rec.Failed != nil || len(rec.Finished) != 3 {
		t.Fatalf("record after the rollout: %+v", rec)
	}
}

// A server that stopped after a machine's install, before its reboot,
// or after the reboot went out but before it was recorded, is followed by
// one that neither installs again nor reboots twice.
func TestRollResumesAnInstalledUpgrade(t *testing.T) {
	for _, rebootSent := range []bool{false, true} {
		r := newRig(t)
		r.version = "v1.14.0"
		tr := r.formed("acme", 1, 1)
		d := tr.desired(tr.cpCfg, tr.wCfg, "1.14.1")
		rec, err := r.plane.prepare(d)
		if err != nil {
			t.Fatal(err)
		}
		w := tr.ms[1]
		rec.Current = &Operation{Machine: w.ID, Address: w.Address, NodeGroup: "w", Op: OpUpgrade, Lifecycle: true,
			FromVersion: "v1.14.0", ToVersion: "v1.14.1", StartedAt: time.Now()}
		if err := r.plane.save(KindRollout, "acme", rec); err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t)
		if err := r.plane.install(ctx, d, rec); err != nil {
			t.Fatal(err)
		}
		if rebootSent {
			if err := r.plane.issue(ctx, d, rec); err != nil {
				t.Fatal(err)
			}
			// The server dies before the record of the reboot is on disk.
			rec.Current.Issued, rec.Current.Phase = false, PhaseInstalled
			if err := r.plane.save(KindRollout, "acme", rec); err != nil {
				t.Fatal(err)
			}
		}
		if got, _, _ := r.plane.Rollout("acme"); got.Current == nil || got.Current.Phase != PhaseInstalled {
			t.Fatalf("record before the restart: %+v", got.Current)
		}
		if _, err := r.newPlane(r.opts).Roll(ctx, d); err != nil {
			t.Fatal(err)
		}
		for _, m := range tr.ms {
			if got, want := r.calls(m.ID), []string{"LifecycleService.Upgrade", "Reboot"}; !slices.Equal(got, want) {
				t.Errorf("reboot sent %v: %s took %q, want %q", rebootSent, m.ID, got, want)
			}
			if info, _ := r.host.Node(m.ID); info.Version != "v1.14.1" {
				t.Errorf("reboot sent %v: %s runs %s", rebootSent, m.ID, info.Version)
			}
		}
		// The worker's operation was under way: it finishes first.
		if got := machineIDs(tr.ops("Reboot")); !slices.Equal(got, []string{w.ID, tr.ms[0].ID}) {
			t.Errorf("reboot sent %v: reboots on %v", rebootSent, got)
		}
	}
}
