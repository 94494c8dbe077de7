package talosnode

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
)

func refused(a string) bool {
	c, err := net.DialTimeout("tcp", a+":50000", time.Second)
	if err == nil {
		c.Close()
	}
	return err != nil
}

func TestFaultsFromTheFaultsFile(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 11)
	bootWorker(t, h, secrets, "vm-f", a)
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)

	// Another process writes the faults file; the host picks it up by itself.
	if err := WriteFaults(h.Dir(), Faults{"vm-f": {Refuse: true}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "refused connections", func() bool { return refused(a) })
	if info, _ := h.Node(a); info.Reachable || !info.Fault.Refuse {
		t.Fatalf("refusing node: %+v", info)
	}
	// By address, an unhealthy kubelet; the port opens again.
	if err := WriteFaults(h.Dir(), Faults{a: {Unhealthy: "kubelet"}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	if refused(a) {
		t.Fatal("the port stayed closed after the fault was cleared")
	}
	ms, err := machineStatus(ctx, c)
	for err != nil { // the client backs off after the refusals
		time.Sleep(100 * time.Millisecond)
		ms, err = machineStatus(ctx, c)
	}
	if ms.Status.Ready || len(ms.Status.UnmetConditions) != 1 || ms.Status.UnmetConditions[0].Name != "services" || ms.Status.UnmetConditions[0].Reason != "kubelet not healthy" {
		t.Fatalf("unhealthy node's status: %+v", ms)
	}
	if s := services(t, ctx, c); s["kubelet"].Health.Healthy || s["kubelet"].State != "Running" || !strings.Contains(s["kubelet"].Health.LastMessage, "10248") {
		t.Fatalf("kubelet: %+v", s["kubelet"])
	}
	if err := h.SetFault(a, Fault{}); err != nil {
		t.Fatal(err)
	}
	if ms, err := machineStatus(ctx, c); err != nil || !ms.Status.Ready {
		t.Fatalf("healed node: %+v %v", ms, err)
	}
}

func TestUpgradeThatNeverComesBackFallsBack(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 12)
	bootWorker(t, h, secrets, "vm-n", a)
	waitRunning(t, h, a)
	if err := h.SetFault("vm-n", Fault{NoUpgradeReturn: true}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if _, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.12.7")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "down", func() bool { return refused(a) })
	// It stays down for the fallback time, then runs the old version.
	eventually(t, "back", func() bool { return !refused(a) })
	if d := time.Since(start); d < testTimings.Fallback-50*time.Millisecond {
		t.Fatalf("back after %s, before the fallback time %s", d, testTimings.Fallback)
	}
	info := waitRunning(t, h, a)
	if info.Version != "v1.12.6" || info.PreviousVersion != "" {
		t.Fatalf("after the fallback: %+v", info)
	}
	// Rollback is accepted and keeps the old version.
	var err error
	for err = c.Rollback(ctx); err != nil && strings.Contains(err.Error(), "Unavailable"); err = c.Rollback(ctx) {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	info = waitRunning(t, h, a)
	if info.Version != "v1.12.6" {
		t.Fatalf("after rollback: %+v", info)
	}
}

func TestResetLeavesEtcdAndMetalReturnsToMaintenance(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, _ := bootCluster(t, h, secrets, 3, 0)
	for _, a := range cps {
		waitRunning(t, h, a)
	}
	ctx := ctxT(t)
	if err := adminClient(t, secrets, cps[0]).Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	// A metal control plane joins, then is reset gracefully.
	m := addr(h, 30)
	if err := h.StartMaintenance(m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "maintenance", func() bool { i, _ := h.Node(m); return i.Stage == runtime.MachineStageMaintenance })
	if _, err := insecureClient(t, m).ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: machineConfig(t, secrets, "controlplane", true)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "metal member", func() bool { i, _ := h.Node(m); return i.EtcdMember })
	mc := adminClient(t, secrets, m)
	eventually(t, "metal API", func() bool { _, err := mc.Version(ctx); return err == nil })
	if err := mc.ResetGeneric(ctx, &machine.ResetRequest{Graceful: true, Reboot: true}); err != nil {
		t.Fatal(err)
	}
	list, err := adminClient(t, secrets, cps[1]).EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil || len(list.Messages[0].Members) != 3 {
		t.Fatalf("members after the graceful reset began: %v %v", list, err)
	}
	eventually(t, "back in maintenance", func() bool {
		i, _ := h.Node(m)
		return i.Stage == runtime.MachineStageMaintenance && i.ConfigSHA256 == "" && !i.EtcdMember && i.Reachable
	})
	j, _ := h.Journal(m)
	if last := j[len(j)-1]; last.Call != "Reset" || !last.Graceful || !last.Reboot {
		t.Fatalf("journal: %+v", j)
	}
	// Reset without reboot powers off until powered on again.
	if _, err := insecureClient(t, m).ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: machineConfig(t, secrets, "worker", true)}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, m)
	wc := adminClient(t, secrets, m)
	eventually(t, "metal worker API", func() bool { _, err := wc.Version(ctx); return err == nil })
	if err := wc.ResetGeneric(ctx, &machine.ResetRequest{Graceful: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "powered off", func() bool { i, _ := h.Node(m); return i.Stage == runtime.MachineStageShuttingDown && !i.Reachable })
	time.Sleep(testTimings.Boot * 2)
	if !refused(m) {
		t.Fatal("a powered off machine accepts connections")
	}
	if err := h.StartMaintenance(m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "powered on", func() bool { i, _ := h.Node(m); return i.Stage == runtime.MachineStageMaintenance && i.Reachable })
}

func TestStateSurvivesARestartOfTheHost(t *testing.T) {
	dir := t.TempDir()
	h, err := Open(Options{Dir: dir, Timings: testTimings})
	if err != nil {
		t.Fatal(err)
	}
	secrets := bundle(t, "a")
	cp, w := addr(h, 1), addr(h, 2)
	if err := h.Boot("vm-cp", cp, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	if err := h.Boot("vm-w", w, machineConfig(t, secrets, "worker", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, cp)
	waitRunning(t, h, w)
	ctx := ctxT(t)
	c := adminClient(t, secrets, cp)
	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	labels := machineConfig(t, secrets, "controlplane", false, labelPatch)
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: labels, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}
	// The worker is in the middle of an upgrade when the host stops.
	if _, err := adminClient(t, secrets, w).UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.12.7")); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if !refused(cp) {
		t.Fatal("a closed host still serves")
	}

	h2 := openHost(t, dir)
	if h2.Block() != h.Block() {
		t.Fatalf("block changed across the restart: %s, %s", h.Block(), h2.Block())
	}
	info := waitRunning(t, h2, cp)
	if info.ConfigSHA256 != hashHex(labels) || !info.EtcdMember {
		t.Fatalf("control plane after the restart: %+v", info)
	}
	info = waitRunning(t, h2, w)
	if info.Version != "v1.12.7" || info.PreviousVersion != "v1.12.6" {
		t.Fatalf("worker after the restart: %+v", info)
	}
	c2 := adminClient(t, secrets, cp)
	err = c2.Bootstrap(ctx, &machine.BootstrapRequest{})
	wantCode(t, "bootstrap after the restart", err, codes.AlreadyExists, "etcd data directory is not empty")
	j, err := h2.Journal("vm-cp")
	if err != nil || len(j) != 3 || j[0].Call != "Bootstrap" || j[1].Call != "ApplyConfiguration" || j[2].Error == "" {
		t.Fatalf("journal after the restart: %+v %v", j, err)
	}
	if _, err := ReadJournal(dir, "vm-cp"); err != nil {
		t.Fatal(err)
	}
}

// TestStatusDelayFault: a read of the MachineStatus of a node with a
// StatusDelay answers after the delay, with the node as it was when read:
// ready, although it turned unready meanwhile. The next read, started
// without the fault, answers at once and unready.
func TestStatusDelayFault(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 1, 1)
	waitRunning(t, h, cps[0])
	w := workers[0]
	waitRunning(t, h, w)
	c := adminClient(t, secrets, w)
	eventually(t, "the worker ready", func() bool {
		ms, err := machineStatus(ctxT(t), c)
		return err == nil && ms.Status.Ready
	})
	const delay = 2 * time.Second
	if err := h.SetFault(w, Fault{StatusDelay: delay}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		ms    *runtime.MachineStatusSpec
		err   error
		after time.Duration
	}
	held := make(chan answer, 1)
	start := time.Now()
	go func() {
		ms, err := machineStatus(ctxT(t), c)
		held <- answer{ms, err, time.Since(start)}
	}()
	time.Sleep(delay / 2)
	if err := h.SetFault(w, Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	a := <-held
	if a.err != nil || a.after < delay || !a.ms.Status.Ready {
		t.Fatalf("the held read: %+v after %s (%v), want ready after at least %s", a.ms, a.after, a.err, delay)
	}
	start = time.Now()
	ms, err := machineStatus(ctxT(t), c)
	if err != nil || ms.Status.Ready || time.Since(start) >= delay {
		t.Fatalf("the read after: %+v after %s (%v), want unready at once", ms, time.Since(start), err)
	}
}
