package talos

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestInMaintenanceTellsAWaitingMachine: a machine in maintenance mode is
// told from one that has its config, and from an address where nothing
// answers; the observer shows the first in stage maintenance.
func TestInMaintenanceTellsAWaitingMachine(t *testing.T) {
	h, addrs := metalHost(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bundle := bundle(t, "lab")
	pool := NewPool(PoolOptions{})
	defer pool.Close()
	if !pool.InMaintenance(ctx, addrs[0]) {
		t.Fatal("a machine in maintenance mode not told")
	}
	p := NewProber(pool, ProberOptions{Timeout: 2 * time.Second})
	m := Machine{ID: "lab-0", Address: addrs[0], NodeGroup: "w"}
	if o := p.Fresh(ctx, "lab", bundle, m); o.Connected || o.Stage != schema.StageMaintenance {
		t.Fatalf("observation of a machine in maintenance mode: %+v", o)
	}
	if st := status.Machine(schema.MachineStatus{Stage: schema.StageReady}, p.Fresh(ctx, "lab", bundle, m).probe(m, "")); st.Stage != schema.StageMaintenance || st.Connected {
		t.Fatalf("status of a machine in maintenance mode: %+v", st)
	}

	c, release, err := pool.Maintenance(addrs[0], "")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ApplyMaintenance(ctx, c, metalConfig(t, bundle, rtalos.RoleControlPlane, "lab-cp-1")); err != nil {
		t.Fatal(err)
	}
	metalEventually(t, addrs[0]+" running", running(h, addrs[0]))
	if pool.InMaintenance(ctx, addrs[0]) {
		t.Fatal("a configured machine taken for one in maintenance mode")
	}
	metalEventually(t, "the configured machine observed with the tenant's credentials", func() bool {
		o := p.Fresh(ctx, "lab", bundle, m)
		return o.Connected && o.Stage != schema.StageMaintenance
	})
	if pool.InMaintenance(ctx, "127.0.0.1") {
		t.Fatal("an address where nothing listens taken for a machine in maintenance mode")
	}
}

// TestResetRemovedLastControlPlaneWithoutLeave: the last control plane has
// no etcd left to leave; it is reset at once, not gracefully.
func TestResetRemovedLastControlPlaneWithoutLeave(t *testing.T) {
	h, addrs := metalHost(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bundle := bundle(t, "lab")
	pool := NewPool(PoolOptions{})
	defer pool.Close()
	mc, release, err := pool.Maintenance(addrs[0], "")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ApplyMaintenance(ctx, mc, metalConfig(t, bundle, rtalos.RoleControlPlane, "lab-cp-1")); err != nil {
		t.Fatal(err)
	}
	metalEventually(t, addrs[0]+" running", running(h, addrs[0]))
	c, releaseAdmin, err := pool.Admin("lab", bundle, addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer releaseAdmin()
	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	metalEventually(t, "in etcd", func() bool { m, _ := InEtcd(ctx, c, "lab-cp-1"); return m })
	if err := ResetRemoved(ctx, c, nil, "lab-cp-1", true); err != nil {
		t.Fatal(err)
	}
	j, _ := h.Journal(addrs[0])
	var calls []string
	for _, e := range j {
		if e.Error == "" {
			calls = append(calls, e.Call)
		}
	}
	last := j[len(j)-1]
	if len(calls) != 3 || calls[2] != "Reset" || last.Graceful || !last.Reboot {
		t.Fatalf("journal: %+v; want its config, the bootstrap, then a reset without leaving etcd, not graceful", j)
	}
}
