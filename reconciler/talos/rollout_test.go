package talos

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// tenantRig is a formed tenant: bootstrapped, every machine ready.
type tenantRig struct {
	*rig
	tenant  string
	secrets []byte
	ms      []Machine
	cpCfg   []byte
	wCfg    []byte
}

func (r *rig) formed(tenant string, cps, workers int) *tenantRig {
	r.t.Helper()
	secrets := bundle(r.t, tenant)
	tr := &tenantRig{rig: r, tenant: tenant, secrets: secrets,
		cpCfg: renderConfig(r.t, tenant, secrets, "controlplane"), wCfg: renderConfig(r.t, tenant, secrets, "worker")}
	tr.ms = r.cluster(tenant, cps, workers, tr.cpCfg, tr.wCfg)
	ctx := ctxT(r.t)
	if _, err := r.plane.Bootstrap(ctx, tenant, secrets, tr.ms); err != nil {
		r.t.Fatal(err)
	}
	eventually(r.t, "every machine ready", func() bool {
		for _, o := range r.plane.observeAll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")) {
			if !o.Ready {
				return false
			}
		}
		return true
	})
	return tr
}

// desired is the tenant with these configs and this Talos version.
func (tr *tenantRig) desired(cpCfg, wCfg []byte, version string) Desired {
	return Desired{Tenant: tr.tenant, Bundle: tr.secrets, Machines: tr.ms, Groups: map[string]GroupTarget{
		"cp": {Config: cpCfg, TalosVersion: version},
		"w":  {Config: wCfg, TalosVersion: version},
	}}
}

// op is one write call a machine accepted.
type op struct {
	machine string
	call    string
	at      time.Time
}

// ops returns the calls of the tenant's machines, oldest first.
func (tr *tenantRig) ops(calls ...string) []op {
	var out []op
	for _, m := range tr.ms {
		for _, e := range tr.journal(m.ID, calls...) {
			out = append(out, op{machine: m.ID, call: e.Call, at: e.Time})
		}
	}
	slices.SortFunc(out, func(a, b op) int { return a.at.Compare(b.at) })
	return out
}

func machineIDs(ops []op) []string {
	var out []string
	for _, o := range ops {
		out = append(out, o.machine)
	}
	return out
}

func ids(ms []Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// checkOneAtATime fails unless each call came after the machine before
// was back: at least minGap after the previous call.
func checkOneAtATime(t *testing.T, ops []op, minGap time.Duration) {
	t.Helper()
	for i := 1; i < len(ops); i++ {
		if gap := ops[i].at.Sub(ops[i-1].at); gap < minGap {
			t.Errorf("%s on %s came %v after %s on %s, less than the %v a machine takes to come back",
				ops[i].call, ops[i].machine, gap, ops[i-1].call, ops[i-1].machine, minGap)
		}
	}
}

func TestRollAppliesAChangedConfigInPlaceOneMachineAtATime(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 3, 2)
	var progress []status.Rollout
	opts := r.opts
	opts.OnProgress = func(p status.Rollout) { progress = append(progress, p) }
	pl := r.newPlane(opts)
	ctx := ctxT(t)
	// A first call records the generation of what the machines run.
	if rolled, err := pl.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")); err != nil || len(rolled.Machines) != 0 {
		t.Fatalf("rolled %+v, %v", rolled, err)
	}
	if got := tr.ops("ApplyConfiguration", "Upgrade", "Reboot"); len(got) != 0 {
		t.Fatalf("calls with nothing to change: %v", got)
	}
	patch := "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n"
	cp2, w2 := renderConfig(t, "acme", tr.secrets, "controlplane", patch), renderConfig(t, "acme", tr.secrets, "worker", patch)
	rolled, err := pl.Roll(ctx, tr.desired(cp2, w2, "1.12.6"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rolled.Machines, ids(tr.ms)) || !maps.Equal(rolled.Ops, map[string]int{OpApply: 5}) {
		t.Fatalf("Roll says it rolled %+v, want 5 configs applied on %v", rolled, ids(tr.ms))
	}
	applies := tr.ops("ApplyConfiguration")
	if got, want := machineIDs(applies), ids(tr.ms); !slices.Equal(got, want) {
		t.Fatalf("applies on %v, want one per machine, control planes first: %v", got, want)
	}
	for _, m := range tr.ms {
		info, _ := r.host.Node(m.ID)
		want := sha256Hex(w2)
		if m.ControlPlane {
			want = sha256Hex(cp2)
		}
		if info.ConfigSHA256 != want {
			t.Errorf("%s runs config %.12s, want %.12s", m.ID, info.ConfigSHA256, want)
		}
		if j := r.journal(m.ID, "ApplyConfiguration"); j[0].Mode != "auto" || j[0].Applied != "no_reboot" {
			t.Errorf("%s: apply mode %s, applied %s; want auto, taken without a reboot", m.ID, j[0].Mode, j[0].Applied)
		}
	}
	// Progress went machine by machine and ended inactive.
	last := progress[len(progress)-1]
	if last.Active || last.Total != 5 || last.Groups["cp"].Finished != 3 || last.Groups["w"].Finished != 2 {
		t.Fatalf("last progress %+v", last)
	}
	seen := map[int]bool{}
	for _, p := range progress {
		if p.Active && p.Machine != "" {
			seen[p.N] = true
		}
	}
	if len(seen) != 5 {
		t.Fatalf("progress showed machines %v of 5", seen)
	}
}

func TestRollUpgradesControlPlanesFirstOneAtATime(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 3, 2)
	ctx := ctxT(t)
	rolled, err := r.plane.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.7"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rolled.Machines) != 5 || !maps.Equal(rolled.Ops, map[string]int{OpUpgrade: 5}) {
		t.Fatalf("Roll says it rolled %+v, want 5 upgrades", rolled)
	}
	ups := tr.ops("Upgrade")
	if got, want := machineIDs(ups), ids(tr.ms); !slices.Equal(got, want) {
		t.Fatalf("upgrades on %v, want %v", got, want)
	}
	// A machine is back after its upgrade stage, the reboot and the boot.
	checkOneAtATime(t, ups, testTimings.Upgrade+testTimings.Reboot+testTimings.Boot)
	for _, m := range tr.ms {
		if info, _ := r.host.Node(m.ID); info.Version != "v1.12.7" {
			t.Errorf("%s runs %s", m.ID, info.Version)
		}
		if j := r.journal(m.ID, "Upgrade"); j[0].Image != "ghcr.io/siderolabs/installer:v1.12.7" {
			t.Errorf("%s upgraded to image %s", m.ID, j[0].Image)
		}
	}
	rec, _, _ := r.plane.Rollout("acme")
	if rec.Current != nil || rec.Failed != nil || len(rec.Finished) != 5 {
		t.Fatalf("record after the rollout: %+v", rec)
	}
}

func TestRollRollsBackAMachineThatDoesNotComeBackAndStops(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 3)
	bad := tr.ms[2]
	if err := r.host.SetFault(bad.ID, talosnode.Fault{NoUpgradeReturn: true}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.7")
	_, err := r.plane.Roll(ctx, d)
	var stopped *StoppedError
	if !errors.As(err, &stopped) || stopped.Machine != bad.label() || !strings.Contains(stopped.Reason, "rolled back to v1.12.6") {
		t.Fatalf("err = %v, want the rollout stopped at %s after a rollback", err, bad.label())
	}
	if got := r.journal(bad.ID, "Rollback"); len(got) != 1 {
		t.Fatalf("%s got %d rollbacks", bad.ID, len(got))
	}
	if got := machineIDs(tr.ops("Upgrade")); !slices.Equal(got, ids(tr.ms[:3])) {
		t.Fatalf("upgrades on %v: the machines after %s must be left alone", got, bad.ID)
	}
	rec, _, _ := r.plane.Rollout("acme")
	if rec.Failed == nil || rec.Failed.Machine != bad.ID || !rec.Failed.RolledBack {
		t.Fatalf("record %+v", rec)
	}
	// The same target again: stopped at once, nothing is called.
	if _, err := r.plane.Roll(ctx, d); !errors.As(err, &stopped) {
		t.Fatalf("rerun: %v", err)
	}
	if got := len(tr.ops("Upgrade", "Rollback")); got != 4 {
		t.Fatalf("a rerun of a stopped rollout made calls (%d)", got)
	}
	eventually(t, bad.ID+" back on the old version", func() bool {
		info, _ := r.host.Node(bad.ID)
		return info.Reachable && info.Version == "v1.12.6"
	})
	// A new target starts again, from the machine that failed.
	if err := r.host.SetFault(bad.ID, talosnode.Fault{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.plane.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.8")); err != nil {
		t.Fatal(err)
	}
	for _, m := range tr.ms {
		if info, _ := r.host.Node(m.ID); info.Version != "v1.12.8" {
			t.Errorf("%s runs %s", m.ID, info.Version)
		}
	}
}

func TestRollResumesAfterAStopWithTheSameMachine(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 3, 1)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.7")
	// The server stops while the second machine upgrades.
	ctx, cancel := context.WithCancel(ctxT(t))
	opts := r.opts
	opts.OnProgress = func(p status.Rollout) {
		if p.N == 2 && p.Stage == "updating" {
			cancel()
		}
	}
	if _, err := r.newPlane(opts).Roll(ctx, d); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled", err)
	}
	rec, _, _ := r.plane.Rollout("acme")
	if rec.Current == nil || rec.Current.Machine != tr.ms[1].ID || !rec.Current.Issued {
		t.Fatalf("record after the stop: %+v", rec.Current)
	}
	if pending, err := r.plane.Pending("acme"); !pending || err != nil {
		t.Fatalf("an interrupted rollout is not pending: %v %v", pending, err)
	}
	// A new server resumes: it waits for that machine before the next.
	if _, err := r.newPlane(r.opts).Roll(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	ups := tr.ops("Upgrade")
	if got := machineIDs(ups); !slices.Equal(got, ids(tr.ms)) {
		t.Fatalf("upgrades on %v, want one per machine", got)
	}
	checkOneAtATime(t, ups, testTimings.Upgrade+testTimings.Reboot+testTimings.Boot)
	if pending, err := r.plane.Pending("acme"); pending || err != nil {
		t.Fatalf("a finished rollout is pending: %v %v", pending, err)
	}
}

func TestRollMakesARecordedCallThatNeverReachedTheMachine(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.7")
	rec, err := r.plane.prepare(d)
	if err != nil {
		t.Fatal(err)
	}
	// A server recorded the worker's upgrade and died before the call.
	rec.Current = &Operation{Machine: tr.ms[1].ID, Address: tr.ms[1].Address, NodeGroup: "w", Op: OpUpgrade,
		FromVersion: "v1.12.6", ToVersion: "v1.12.7", StartedAt: time.Now()}
	if err := r.plane.save(KindRollout, "acme", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := r.newPlane(r.opts).Roll(ctxT(t), d); err != nil {
		t.Fatal(err)
	}
	// The worker goes first (its operation was under way), then the
	// control plane; each once.
	if got := machineIDs(tr.ops("Upgrade")); !slices.Equal(got, []string{tr.ms[1].ID, tr.ms[0].ID}) {
		t.Fatalf("upgrades on %v", got)
	}
}

func TestRestartAnnotationRebootsEachMachineOncePerValue(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 2, 2)
	ctx := ctxT(t)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")
	d.RestartedAt = "2026-03-04T05:00:00Z" // set when the tenant was created
	if _, err := r.plane.Roll(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := tr.ops("Reboot"); len(got) != 0 {
		t.Fatalf("machines that booted after the annotation rebooted: %v", got)
	}
	d.RestartedAt = "2026-03-04T06:00:00Z"
	for range 2 {
		if _, err := r.plane.Roll(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	reboots := tr.ops("Reboot")
	if got := machineIDs(reboots); !slices.Equal(got, ids(tr.ms)) {
		t.Fatalf("reboots on %v, want each machine once", got)
	}
	checkOneAtATime(t, reboots, testTimings.Reboot+testTimings.Boot)
	// A node group's own annotation restarts its machines only.
	g := d.Groups["w"]
	g.RestartedAt = "2026-03-04T07:00:00Z"
	d.Groups["w"] = g
	if _, err := r.plane.Roll(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := machineIDs(tr.ops("Reboot"))[4:]; !slices.Equal(got, ids(tr.ms[2:])) {
		t.Fatalf("reboots for the workers' annotation on %v", got)
	}
}

func TestRollWaitsForHealthyEtcdBeforeAControlPlane(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 3, 0)
	if err := r.host.SetFault(tr.ms[2].ID, talosnode.Fault{Unhealthy: "etcd"}); err != nil {
		t.Fatal(err)
	}
	opts := r.opts
	opts.Wait = 500 * time.Millisecond
	// A config change: Talos itself would apply it with etcd unhealthy.
	cp2 := renderConfig(t, "acme", tr.secrets, "controlplane", "machine:\n  kubelet:\n    extraArgs:\n      v: \"2\"\n")
	_, err := r.newPlane(opts).Roll(ctxT(t), tr.desired(cp2, tr.wCfg, "1.12.6"))
	var w *WaitingError
	if !errors.As(err, &w) || !strings.Contains(err.Error(), "every etcd member to be healthy") || w.Machine != tr.ms[0].label() {
		t.Fatalf("err = %v, want to wait for etcd before %s", err, tr.ms[0].label())
	}
	if got := tr.ops("ApplyConfiguration"); len(got) != 0 {
		t.Fatalf("applies while an etcd member was unhealthy: %v", got)
	}
}

// TestWanted: a tenant whose manifests did not change needs the plane
// while it is not bootstrapped, has no rollout record, or has a rollout
// under way, and when its manifests declare a restart (of the tenant or
// of one of its node groups) or a Kubernetes version that its rollouts
// have not done; a stopped rollout waits for a new commit.
func TestWanted(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	pool := NewPool(PoolOptions{})
	t.Cleanup(pool.Close)
	pl, err := New(Options{Store: st, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	save := func(kind string, v any) {
		t.Helper()
		if err := pl.save(kind, "acme", v); err != nil {
			t.Fatal(err)
		}
	}
	done := RestartValues{Tenant: "t1", Groups: map[string]string{"workers": "w1"}}
	for _, c := range []struct {
		name     string
		boot     *BootstrapRecord
		rollout  *RolloutRecord
		restarts RestartValues
		k8s      string
		want     bool
	}{
		{name: "no records", want: true},
		{name: "bootstrap under way", boot: &BootstrapRecord{Tenant: "acme"}, want: true},
		{name: "no rollout yet", boot: &BootstrapRecord{Tenant: "acme", Done: true}, want: true},
		{name: "rollout under way", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout: &RolloutRecord{Tenant: "acme", Current: &Operation{Machine: "m1"}}, want: true},
		{name: "rollout stopped", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout: &RolloutRecord{Tenant: "acme", Failed: &Failure{Machine: "m1"}}},
		{name: "rollout complete", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout: &RolloutRecord{Tenant: "acme", Completed: true, Restarts: done}, restarts: done},
		{name: "no restart declared", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout: &RolloutRecord{Tenant: "acme", Completed: true, Restarts: done}, restarts: RestartValues{Groups: map[string]string{"workers": ""}}},
		{name: "tenant restart not done", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout:  &RolloutRecord{Tenant: "acme", Completed: true, Restarts: done},
			restarts: RestartValues{Tenant: "t2", Groups: done.Groups}, want: true},
		{name: "group restart not done", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout:  &RolloutRecord{Tenant: "acme", Completed: true, Restarts: done},
			restarts: RestartValues{Tenant: "t1", Groups: map[string]string{"workers": "w1", "controlplane": "c1"}}, want: true},
		{name: "kubernetes at the version rolled", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout: &RolloutRecord{Tenant: "acme", Completed: true, Restarts: done, KubernetesVersion: "1.36.4"}, restarts: done, k8s: "1.36.4"},
		{name: "kubernetes upgrade not rolled", boot: &BootstrapRecord{Tenant: "acme", Done: true},
			rollout: &RolloutRecord{Tenant: "acme", Completed: true, Restarts: done, KubernetesVersion: "1.36.4"}, restarts: done, k8s: "1.37.1", want: true},
	} {
		err := st.Update(func(tx store.Tx) error {
			for _, kind := range []string{KindBootstrap, KindRollout} {
				if _, err := tx.Delete(kind, "acme"); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.boot != nil {
			save(KindBootstrap, c.boot)
		}
		if c.rollout != nil {
			save(KindRollout, c.rollout)
		}
		if got, err := pl.Wanted("acme", c.restarts, c.k8s); got != c.want || err != nil {
			t.Errorf("%s: wanted %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}

// TestRollCallsNothingTheGateRefuses: while the gate refuses (a replica
// whose lease may have ended), a rollout makes no call that disrupts a
// machine, and says why; once it allows, the rollout goes on.
func TestRollCallsNothingTheGateRefuses(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	var shut atomic.Bool
	shut.Store(true)
	opts := r.opts
	opts.Gate = func() error {
		if shut.Load() {
			return errors.New("this replica's lease may have ended")
		}
		return nil
	}
	r.plane = r.newPlane(opts)
	ctx := ctxT(t)
	_, err := r.plane.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.7"))
	if err == nil || !strings.Contains(err.Error(), "lease may have ended") {
		t.Fatalf("Roll while the gate refuses: %v, want the gate's reason", err)
	}
	if ups := tr.ops("Upgrade"); len(ups) != 0 {
		t.Fatalf("the machines got %d upgrades while the gate refused", len(ups))
	}
	shut.Store(false)
	if _, err := r.plane.Roll(ctx, tr.desired(tr.cpCfg, tr.wCfg, "1.12.7")); err != nil {
		t.Fatal(err)
	}
	if ups := tr.ops("Upgrade"); len(ups) != 2 {
		t.Fatalf("the machines got %d upgrades once the gate allowed, want 2", len(ups))
	}
}
