package talos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
)

var metalTimings = talosnode.Timings{
	Boot: 100 * time.Millisecond, Install: 100 * time.Millisecond, Reboot: 200 * time.Millisecond,
	Upgrade: 100 * time.Millisecond, Reset: 100 * time.Millisecond, LogInterval: 50 * time.Millisecond,
}

// metalHost starts a node host and n bare-metal machines in maintenance
// mode at addresses of its block.
func metalHost(t *testing.T, n int) (*talosnode.Host, []string) {
	t.Helper()
	h, err := talosnode.Open(talosnode.Options{Dir: t.TempDir(), Timings: metalTimings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var addrs []string
	for i := range n {
		a := netip.AddrFrom4([4]byte{127, byte(h.Block()), 7, byte(i + 1)}).String()
		if err := h.StartMaintenance(a); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	return h, addrs
}

// metalConfig renders a metal machine's config as the plane applies it.
func metalConfig(t *testing.T, bundle []byte, role, hostname string) []byte {
	t.Helper()
	group, err := rtalos.MachineConfig(rtalos.ConfigInput{ClusterName: "lab", ControlPlaneEndpoint: "https://127.9.9.9:6443",
		KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", Role: role, Secrets: bundle,
		Mode: rtalos.ModeMetal, InstallDisk: "/dev/sda"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rtalos.MetalMachineConfig(group, hostname, "/dev/nvme0n1")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func metalEventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func running(h *talosnode.Host, key string) func() bool {
	return func() bool {
		i, _ := h.Node(key)
		return i.Stage == runtime.MachineStageRunning && i.Reachable
	}
}

// TestApplyMaintenance gives a metal machine its config over the
// maintenance API, with the machine's pinned fingerprint; a wrong
// fingerprint is refused before anything is sent, and a machine that has
// its config no longer takes one in maintenance mode.
func TestApplyMaintenance(t *testing.T) {
	h, addrs := metalHost(t, 1)
	bundle, err := rtalos.GenerateSecrets("1.12.6", time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := metalConfig(t, bundle, rtalos.RoleControlPlane, "lab-cp-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := NewPool(PoolOptions{})
	defer pool.Close()

	wrong, release, err := pool.Maintenance(addrs[0], "9tDUR2QTrDwvR9wUpjL6JuojzFc59q9dp3Y8aNs4Gho=")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ApplyMaintenance(ctx, wrong, cfg); !errors.Is(err, ErrNotInMaintenance) {
		t.Fatalf("apply with a wrong fingerprint: %v", err)
	}
	if j, _ := h.Journal(addrs[0]); len(j) != 0 {
		t.Fatalf("the machine got a call through a wrong fingerprint: %+v", j)
	}

	fp, err := h.MaintenanceFingerprint(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	c, release, err := pool.Maintenance(addrs[0], fp)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ApplyMaintenance(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	j, err := h.Journal(addrs[0])
	if err != nil || len(j) != 1 {
		t.Fatalf("journal %+v, %v", j, err)
	}
	if e := j[0]; e.Call != "ApplyConfiguration" || e.Stage != "maintenance" || e.Error != "" || e.ConfigSHA256 != sha(cfg) {
		t.Fatalf("journal entry: %+v", e)
	}
	metalEventually(t, "installed and running", running(h, addrs[0]))
	if i, _ := h.Node(addrs[0]); i.Hostname != "lab-cp-1" || i.ConfigSHA256 != sha(cfg) {
		t.Fatalf("node after install: %+v", i)
	}
	again, release, err := pool.Maintenance(addrs[0], "")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := ApplyMaintenance(ctx, again, cfg); !errors.Is(err, ErrNotInMaintenance) {
		t.Fatalf("apply to a configured machine: %v", err)
	}
}

// TestResetRemovedLeavesEtcdFirst resets a control plane that its group no
// longer uses: it leaves etcd, and only then is reset, gracefully, and it
// comes back in maintenance mode.
func TestResetRemovedLeavesEtcdFirst(t *testing.T) {
	h, addrs := metalHost(t, 2)
	bundle, err := rtalos.GenerateSecrets("1.12.6", time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := NewPool(PoolOptions{})
	defer pool.Close()
	for i, a := range addrs {
		c, release, err := pool.Maintenance(a, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := ApplyMaintenance(ctx, c, metalConfig(t, bundle, rtalos.RoleControlPlane, "lab-cp-"+string(rune('1'+i)))); err != nil {
			t.Fatal(err)
		}
		release()
	}
	for _, a := range addrs {
		metalEventually(t, a+" running", running(h, a))
	}
	admin := func(a string) *client.Client {
		c, release, err := pool.Admin("lab", bundle, a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
		return c
	}
	peer, gone := admin(addrs[0]), admin(addrs[1])
	if err := peer.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	metalEventually(t, "both in etcd", func() bool {
		m, _ := InEtcd(ctx, peer, "lab-cp-2")
		n, _ := InEtcd(ctx, peer, "lab-cp-1")
		return m && n
	})

	if err := ResetRemoved(ctx, gone, peer, "lab-cp-2", true); err != nil {
		t.Fatal(err)
	}
	if member, err := InEtcd(ctx, peer, "lab-cp-2"); err != nil || member {
		t.Fatalf("after reset: member %v, %v", member, err)
	}
	j, _ := h.Journal(addrs[1])
	var calls []string
	for _, e := range j {
		if e.Error == "" {
			calls = append(calls, e.Call)
		}
	}
	if len(calls) != 3 || calls[1] != "EtcdLeaveCluster" || calls[2] != "Reset" || !j[len(j)-1].Graceful || !j[len(j)-1].Reboot {
		t.Fatalf("journal: %+v", j)
	}
	metalEventually(t, "back in maintenance mode", func() bool {
		i, _ := h.Node(addrs[1])
		return i.Stage == runtime.MachineStageMaintenance && i.Reachable && i.ConfigSHA256 == ""
	})
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
