package test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// TestReplicasPauseDuringApply: the replica that owns a tenant, paused
// (SIGSTOP) past its lease while its tofu creates a machine, cannot
// interrupt that tofu itself; the guard it runs tofu under does, once the
// lease went unrenewed for 2/3 of its TTL. The create in flight is
// cancelled and makes nothing, and the replica that takes the tenant over
// makes the machine, once. Without the guard the paused replica's tofu
// would go on, and its create would make a machine that no state holds:
// the world and the store would differ.
func TestReplicasPauseDuringApply(t *testing.T) {
	rg := startRig(t, rigOptions{})
	rs := rg.replicaSet
	e := rs.e
	leader := rs.waitLeader("r0", "r1", "r2")
	owner := rg.owner("staging")
	rest := others([]string{"r0", "r1", "r2"}, owner)
	s := rs.servers[rest[0]] // the paused replica does not answer
	e.srv = s
	waitSucceeded(s, e.first)
	world, err := sim.OpenExisting(rs.world)
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that the paused owner's create ends after its lease
	// (and after the takeover) unless the guard cancels it.
	const slow = 15 * time.Second
	if err := world.SetCreateDelay(slow); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = world.SetCreateDelay(0) })

	e.setCount("staging", "workers", 2)
	second := e.push("staging: two workers")
	paused := rs.servers[owner]
	out := filepath.Join(paused.Data(), "work", "staging", ".rezuscloud-tofu.out")
	s.WaitFor("the owner's tofu to create the new worker, slowly", func() bool {
		_, err := os.Stat(filepath.Join(rs.world, sim.WaitingFile))
		return err == nil
	})
	paused.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { // a test that stops early lets it stop
		if paused.Running() {
			paused.Signal(syscall.SIGCONT)
		}
	})
	// The create in flight waits already; the next owner's do not.
	if err := world.SetCreateDelay(0); err != nil {
		t.Fatal(err)
	}
	rs.waitLeader(rest...)
	waitSucceeded(s, second)
	t.Logf("replica %s took staging over and completed the commit %s after %s was paused", rg.owner("staging"), time.Since(stopped).Round(time.Millisecond), owner)

	// The paused owner's tofu, still there since the paused server has
	// not cleaned up after it, says what its guard did.
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the paused owner's tofu output: %v", err)
	}
	if !strings.Contains(string(b), "tofu was interrupted, to save its state before another server may take over") {
		t.Errorf("the paused owner's tofu was not interrupted by its guard:\n%s", b)
	}
	// Wait until the paused owner's create would have ended without the
	// guard, then compare: every machine in the world is in the store,
	// once.
	time.Sleep(time.Until(stopped.Add(slow + 2*time.Second)))
	machines := e2eKeys(e2eMachineIDs(s.tenantMachines("staging")))
	if len(machines) != 3 {
		t.Errorf("staging has %d machines after the takeover, want 3: %v", len(machines), machines)
	}
	if diff := cmp.Diff(machines, worldMachines(t, rs.world)); diff != "" {
		t.Errorf("the machines in the store against the world's after the pause (-store +world):\n%s", diff)
	}

	// Woken, the paused replica finds its lease gone. A leader exits, for
	// its supervisor to start it again; a replica that did not lead joins
	// again with a new lease, and holds its shards again.
	paused.Signal(syscall.SIGCONT)
	if owner == leader {
		select {
		case <-paused.Done():
		case <-time.After(e2eTimeout):
			t.Fatalf("replica %s led and runs on after its lease ended while it was paused", owner)
		}
		return
	}
	rs.waitLeader("r0", "r1", "r2")
	cli := rg.etcd.Client(t)
	s.WaitFor(owner+" to hold staging's shard again", func() bool { return shardHolder(cli, "staging") == owner })
}
