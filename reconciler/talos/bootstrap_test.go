package talos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// bootstraps counts the Bootstrap calls each machine accepted.
func (r *rig) bootstraps(ms []Machine) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		if n := len(r.journal(m.ID, "Bootstrap")); n > 0 {
			out[m.ID] = n
		}
	}
	return out
}

func TestBootstrapOnceOnTheFirstControlPlane(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 3, 1, renderConfig(t, "acme", secrets, "controlplane"), renderConfig(t, "acme", secrets, "worker"))
	// The order given does not matter: the first by stable order is.
	shuffled := []Machine{ms[3], ms[2], ms[0], ms[1]}
	ctx := ctxT(t)
	rec, err := r.plane.Bootstrap(ctx, "acme", secrets, shuffled)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Done || rec.Adopted || rec.Machine != ms[0].ID {
		t.Fatalf("record %+v, want done on %s", rec, ms[0].ID)
	}
	if got := r.bootstraps(ms); len(got) != 1 || got[ms[0].ID] != 1 {
		t.Fatalf("Bootstrap calls %v, want one on %s", got, ms[0].ID)
	}
	// Again, and from a new plane on the same store (a restart): no call.
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	if _, err := r.newPlane(r.opts).Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	if got := r.bootstraps(ms); len(got) != 1 || got[ms[0].ID] != 1 {
		t.Fatalf("Bootstrap calls after reruns %v", got)
	}
	// The cluster forms: every control plane becomes an etcd member.
	eventually(t, "three members", func() bool {
		n := 0
		for _, m := range ms[:3] {
			if info, _ := r.host.Node(m.ID); info.EtcdMember {
				n++
			}
		}
		return n == 3
	})
}

func TestBootstrapAdoptsAClusterThatExists(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 2, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	ctx := ctxT(t)
	// Someone bootstrapped the second control plane by hand.
	eventually(t, "cp 1 ready to bootstrap", func() bool {
		o := r.plane.prober.Fresh(ctx, "acme", secrets, ms[1])
		return o.EtcdPreparing
	})
	c, release, err := r.pool.Client("acme", secrets, ms[1].Address)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	release()
	rec, err := r.plane.Bootstrap(ctx, "acme", secrets, ms)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Done || !rec.Adopted {
		t.Fatalf("record %+v, want an adopted cluster", rec)
	}
	if got := r.bootstraps(ms); len(got) != 1 || got[ms[1].ID] != 1 {
		t.Fatalf("Bootstrap calls %v, want only the manual one on %s", got, ms[1].ID)
	}
}

func TestBootstrapAfterACrashUsesTheRecordedMachine(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 3, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	// A server chose the second control plane (its first was not there
	// then) and stopped before its call; the record says so.
	if err := r.plane.save(KindBootstrap, "acme", BootstrapRecord{Tenant: "acme", Machine: ms[1].ID, Address: ms[1].Address, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rec, err := r.newPlane(r.opts).Bootstrap(ctxT(t), "acme", secrets, ms)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.bootstraps(ms); len(got) != 1 || got[ms[1].ID] != 1 || rec.Machine != ms[1].ID || !rec.Done {
		t.Fatalf("Bootstrap calls %v, record %+v: want one on the recorded %s", got, rec, ms[1].ID)
	}
}

func TestBootstrapWaitsWhileAControlPlaneCannotBeAsked(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 2, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	if err := r.host.SetFault(ms[1].ID, talosnodeRefuse); err != nil {
		t.Fatal(err)
	}
	opts := r.opts
	opts.Wait = 500 * time.Millisecond
	_, err := r.newPlane(opts).Bootstrap(ctxT(t), "acme", secrets, ms)
	var w *WaitingError
	if !errors.As(err, &w) || w.Machine != ms[1].label() || !strings.Contains(err.Error(), "etcd membership") {
		t.Fatalf("err = %v, want to wait for %s's etcd membership", err, ms[1].label())
	}
	if got := r.bootstraps(ms); len(got) != 0 {
		t.Fatalf("Bootstrap calls %v while a control plane could not be asked", got)
	}
	if _, found, _ := r.plane.Bootstrapped("acme"); found {
		t.Fatal("a bootstrap was recorded")
	}
	// Once it answers, the bootstrap happens.
	if err := r.host.SetFault(ms[1].ID, talosnodeNoFault); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.plane.Bootstrap(ctx, "acme", secrets, ms); err != nil {
		t.Fatal(err)
	}
	if got := r.bootstraps(ms); got[ms[0].ID] != 1 || len(got) != 1 {
		t.Fatalf("Bootstrap calls %v", got)
	}
}
