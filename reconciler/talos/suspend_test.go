package talos

import (
	"errors"
	"slices"
	"testing"
)

// TestRollStopsBetweenMachinesWhenSuspended: a rollout of a suspended
// tenant touches no machine; one suspended while it runs stops after the
// machine it is working on, never in the middle of one, and the next
// rollout, unsuspended, goes on with the others.
func TestRollStopsBetweenMachinesWhenSuspended(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	ctx := ctxT(t)
	if _, err := r.plane.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")); err != nil {
		t.Fatal(err)
	}
	patch := "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n"
	cp2, w2 := renderConfig(t, "acme", tr.secrets, "controlplane", patch), renderConfig(t, "acme", tr.secrets, "worker", patch)

	d := tr.desired(cp2, w2, "1.12.6")
	d.Suspended = func() bool { return true }
	var susp *SuspendedError
	if _, err := r.plane.Roll(ctx, d); !errors.As(err, &susp) {
		t.Fatalf("Roll of a suspended tenant: %v, want a *SuspendedError", err)
	}
	if got := tr.ops("ApplyConfiguration", "Upgrade", "Reboot"); len(got) != 0 {
		t.Fatalf("a suspended tenant's rollout made calls: %v", got)
	}

	// Suspended once the first machine has taken its config.
	d.Suspended = func() bool { return len(tr.ops("ApplyConfiguration")) > 0 }
	if _, err := r.plane.Roll(ctx, d); !errors.As(err, &susp) || susp.Done != 1 || susp.Of != 3 {
		t.Fatalf("Roll suspended meanwhile: %v, want a *SuspendedError after 1 of 3 machines", err)
	}
	applies := tr.ops("ApplyConfiguration")
	if len(applies) != 1 || applies[0].machine != tr.ms[0].ID {
		t.Fatalf("applies before the suspension: %v, want only the first machine %s", machineIDs(applies), tr.ms[0].ID)
	}
	if info, _ := r.host.Node(tr.ms[0].ID); info.ConfigSHA256 != sha256Hex(cp2) {
		t.Fatalf("the machine worked on when the tenant was suspended runs config %.12s, want the new one", info.ConfigSHA256)
	}
	rec, _, err := r.plane.Rollout("acme")
	if err != nil || rec.Current != nil || rec.Completed {
		t.Fatalf("rollout record after the suspension: current %+v completed %v err %v", rec.Current, rec.Completed, err)
	}

	d.Suspended = nil
	if _, err := r.plane.Roll(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got, want := machineIDs(tr.ops("ApplyConfiguration")), ids(tr.ms); !slices.Equal(got, want) {
		t.Fatalf("applies after resuming: %v, want one per machine: %v", got, want)
	}
}
