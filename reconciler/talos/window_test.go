package talos

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/window"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
)

// movingClock runs at the rate of the real one from a time the test sets.
type movingClock struct {
	mu     sync.Mutex
	at     time.Time
	realAt time.Time
}

func newMovingClock(at time.Time) *movingClock { return &movingClock{at: at, realAt: time.Now()} }

func (c *movingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at.Add(time.Since(c.realAt))
}

func (c *movingClock) Set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.realAt = at, time.Now()
}

// TestRollPausesBetweenMachinesWhenTheWindowCloses: an upgrade that
// starts in the window finishes its machine when the window closes, and
// the next machine waits for the next window; outside a window a config
// that needs no reboot is applied at once.
func TestRollPausesBetweenMachinesWhenTheWindowCloses(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 2)
	w, err := window.Parse("0 2 * * *", "2h", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	clock := newMovingClock(time.Date(2026, 12, 2, 3, 59, 59, 0, time.UTC))
	closes := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	opts := r.opts
	opts.Now = clock.Now
	opts.OnProgress = func(p status.Rollout) {
		// The window closes while the first machine upgrades.
		if p.N == 1 && p.Machine != "" && clock.Now().Before(closes) {
			clock.Set(closes)
		}
	}
	pl := r.newPlane(opts)
	ctx := ctxT(t)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.7")
	d.Windows = window.Set{w}

	_, err = pl.Roll(ctx, d)
	var we *window.WaitError
	want := "the rollout's Talos upgrade of machine " + tr.ms[1].label() + " and 1 machines after it"
	if !errors.As(err, &we) || we.What != want || !we.Next.Equal(time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC)) {
		t.Fatalf("err = %v, want the rollout paused before %s with 2 machines left until the next window", err, tr.ms[1].label())
	}
	if got := machineIDs(tr.ops("Upgrade")); !slices.Equal(got, ids(tr.ms[:1])) {
		t.Fatalf("upgrades on %v, want only the first machine, started in the window", got)
	}
	eventually(t, "the first machine back on the new version", func() bool {
		info, _ := r.host.Node(tr.ms[0].ID)
		return info.Reachable && info.Version == "v1.12.7"
	})
	if pending, err := pl.Pending("acme"); !pending || err != nil {
		t.Fatalf("a paused rollout is not pending: %v %v", pending, err)
	}
	// Still outside the window: nothing more starts.
	if _, err := pl.Roll(ctx, d); !errors.As(err, &we) {
		t.Fatalf("second call outside the window: %v", err)
	}
	if got := len(tr.ops("Upgrade")); got != 1 {
		t.Fatalf("%d upgrades outside the window, want the first only", got)
	}

	// A config that applies without a reboot goes at once, window or not.
	patch := "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n"
	cp2, w2 := renderConfig(t, "acme", tr.secrets, "controlplane", patch), renderConfig(t, "acme", tr.secrets, "worker", patch)
	d2 := tr.desired(cp2, w2, "1.12.6")
	d2.Machines = tr.ms[:1] // the upgraded machine only: a config change alone
	d2.Groups["cp"] = GroupTarget{Config: cp2, TalosVersion: "1.12.7"}
	d2.Windows = d.Windows
	if _, err := pl.Roll(ctx, d2); err != nil {
		t.Fatalf("a config without a reboot outside the window: %v", err)
	}
	if info, _ := r.host.Node(tr.ms[0].ID); info.ConfigSHA256 != sha256Hex(cp2) {
		t.Fatalf("%s runs config %.12s, want the new one", tr.ms[0].ID, info.ConfigSHA256)
	}

	// In the next window the rollout resumes with the machine it paused at.
	clock.Set(time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC))
	if _, err := pl.Roll(ctx, d); err != nil {
		t.Fatalf("in the next window: %v", err)
	}
	ups := tr.ops("Upgrade")
	if got := machineIDs(ups); !slices.Equal(got, ids(tr.ms)) {
		t.Fatalf("upgrades on %v, want one per machine", got)
	}
	checkOneAtATime(t, ups[1:], testTimings.Upgrade+testTimings.Reboot+testTimings.Boot)
	for _, m := range tr.ms[1:] {
		if info, _ := r.host.Node(m.ID); info.Version != "v1.12.7" {
			t.Errorf("%s runs %s", m.ID, info.Version)
		}
	}
}

// TestRollWaitsWithAKubernetesUpgrade: outside a window, a config that
// Talos would apply without a reboot still waits when the rollout changes
// the Kubernetes version; in the window it is applied.
func TestRollWaitsWithAKubernetesUpgrade(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	w, err := window.Parse("0 2 * * *", "2h", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	clock := newMovingClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	opts := r.opts
	opts.Now = clock.Now
	pl := r.newPlane(opts)
	ctx := ctxT(t)
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")
	d.KubernetesVersion, d.Windows = "1.34.1", window.Set{w}
	if _, err := pl.Roll(ctx, d); err != nil {
		t.Fatalf("nothing to change: %v", err)
	}
	patch := "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n"
	d2 := tr.desired(renderConfig(t, "acme", tr.secrets, "controlplane", patch), renderConfig(t, "acme", tr.secrets, "worker", patch), "1.12.6")
	d2.KubernetesVersion, d2.Windows = "1.35.0", d.Windows
	var we *window.WaitError
	if _, err := pl.Roll(ctx, d2); !errors.As(err, &we) || !strings.HasPrefix(we.What, "the rollout's config change of machine ") || !strings.HasSuffix(we.What, " and 1 machines after it") {
		t.Fatalf("a Kubernetes upgrade outside the window: %v, want it to wait", err)
	}
	if got := tr.ops("ApplyConfiguration"); len(got) != 0 {
		t.Fatalf("configs applied outside the window: %v", got)
	}
	clock.Set(time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC))
	if _, err := pl.Roll(ctx, d2); err != nil {
		t.Fatalf("in the window: %v", err)
	}
	rec, _, _ := pl.Rollout("acme")
	if !rec.Completed || rec.KubernetesVersion != "1.35.0" {
		t.Fatalf("record after the upgrade: completed %v, Kubernetes %s", rec.Completed, rec.KubernetesVersion)
	}
}

// TestRollWaitsForABootingMachineOutsideTheWindow: a machine the cloud has
// just created is still booting when the rollout reaches it outside the
// window; the rollout waits for it to answer, finds it on its config, and
// completes, rather than failing to learn whether a config apply would
// reboot it.
func TestRollWaitsForABootingMachineOutsideTheWindow(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 1)
	w, err := window.Parse("0 2 * * *", "2h", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	opts := r.opts
	opts.Now = newMovingClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)).Now
	pl := r.newPlane(opts)
	late := Machine{ID: "acme-late", Address: r.addr(r.next), NodeGroup: "w", Name: "rezussim_machine.ng_w[1]"}
	r.next++
	boot := time.AfterFunc(300*time.Millisecond, func() {
		if err := r.host.Boot(late.ID, late.Address, tr.wCfg); err != nil {
			t.Error(err)
		}
	})
	defer boot.Stop()
	d := tr.desired(tr.cpCfg, tr.wCfg, "1.12.6")
	d.Machines = append(slices.Clone(tr.ms), late)
	d.Windows = window.Set{w}
	if _, err := pl.Roll(ctxT(t), d); err != nil {
		t.Fatalf("a machine booting outside the window: %v", err)
	}
	if got := r.journal(late.ID, "ApplyConfiguration"); len(got) != 0 {
		t.Errorf("%s got %d config applies, want none: it booted on its config", late.ID, len(got))
	}
}
