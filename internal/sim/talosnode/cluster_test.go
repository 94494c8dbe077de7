package talosnode

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
)

// cluster boots cps control planes and workers workers of one bundle.
func bootCluster(t *testing.T, h *Host, secrets []byte, cps, workers int) (cp, w []string) {
	t.Helper()
	cpCfg, wCfg := machineConfig(t, secrets, "controlplane", false), machineConfig(t, secrets, "worker", false)
	for i := range cps + workers {
		a, cfg := addr(h, 20+i), cpCfg
		if i >= cps {
			cfg = wCfg
			w = append(w, a)
		} else {
			cp = append(cp, a)
		}
		if err := h.Boot(fmt.Sprintf("vm-%d", i), a, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return cp, w
}

func services(t *testing.T, ctx context.Context, c *client.Client) map[string]*machine.ServiceInfo {
	t.Helper()
	r, err := c.ServiceList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*machine.ServiceInfo{}
	for _, s := range r.Messages[0].Services {
		out[s.Id] = s
	}
	return out
}

func TestBootstrapOncePerClusterOnAControlPlane(t *testing.T) {
	slow := testTimings
	slow.Boot = 2 * time.Second // long enough to call Bootstrap while the nodes boot
	h := openHostWith(t, "", slow)
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 3, 1)
	ctx := ctxT(t)
	cp0 := adminClient(t, secrets, cps[0])
	// While it boots, bootstrap is not available.
	err := cp0.Bootstrap(ctx, &machine.BootstrapRequest{})
	wantCode(t, "bootstrap while booting", err, codes.FailedPrecondition, "bootstrap is not available yet")
	for _, a := range append(slices.Clone(cps), workers...) {
		waitRunning(t, h, a)
	}
	// A control plane without etcd is running but not ready.
	ms, err := machineStatus(ctx, cp0)
	if err != nil || ms.Status.Ready || len(ms.Status.UnmetConditions) == 0 || !strings.Contains(ms.Status.UnmetConditions[0].Reason, "etcd not running") {
		t.Fatalf("MachineStatus before bootstrap: %+v %v", ms, err)
	}
	if s := services(t, ctx, cp0); s["etcd"].State != "Preparing" || s["kube-apiserver"].State == "Running" {
		t.Fatalf("services before bootstrap: etcd %s, kube-apiserver %s", s["etcd"].State, s["kube-apiserver"].State)
	}
	_, err = cp0.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err == nil || !strings.Contains(err.Error(), "no controlplane endpoints discovered yet") {
		t.Fatalf("member list before bootstrap: %v", err)
	}
	wc := adminClient(t, secrets, workers[0])
	err = wc.Bootstrap(ctx, &machine.BootstrapRequest{})
	wantCode(t, "bootstrap on a worker", err, codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
	_, err = wc.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	wantCode(t, "member list on a worker", err, codes.Unimplemented, "member list is only available on control plane nodes")

	if err := cp0.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range cps[1:] {
		err := adminClient(t, secrets, a).Bootstrap(ctx, &machine.BootstrapRequest{})
		wantCode(t, "second bootstrap on "+a, err, codes.AlreadyExists, "etcd data directory is not empty")
	}
	err = cp0.Bootstrap(ctx, &machine.BootstrapRequest{})
	wantCode(t, "bootstrap again", err, codes.AlreadyExists, "etcd data directory is not empty")

	// The other control planes joined; every node is ready.
	list, err := adminClient(t, secrets, cps[2]).EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil || len(list.Messages[0].Members) != 3 {
		t.Fatalf("members: %v %v", list, err)
	}
	if first := list.Messages[0].Members[0]; first.Hostname != "talos-vm-0" || first.ClientUrls[0] != "https://"+cps[0]+":2379" {
		t.Fatalf("first member: %+v", first)
	}
	for _, a := range append(slices.Clone(cps), workers...) {
		ms, err := machineStatus(ctx, adminClient(t, secrets, a))
		if err != nil || !ms.Status.Ready || ms.Stage != runtime.MachineStageRunning {
			t.Fatalf("%s after bootstrap: %+v %v", a, ms, err)
		}
	}
	s := services(t, ctx, cp0)
	if s["etcd"].State != "Running" || s["kube-apiserver"].State != "Running" || !s["kube-apiserver"].Health.Healthy {
		t.Fatalf("services after bootstrap: etcd %s, kube-apiserver %s", s["etcd"].State, s["kube-apiserver"].State)
	}
	st, err := cp0.EtcdStatus(ctx)
	if err != nil || st.Messages[0].MemberStatus.Leader != list.Messages[0].Members[0].Id {
		t.Fatalf("etcd status: %v %v", st, err)
	}
	// Exactly one Bootstrap succeeded in the whole cluster.
	ok := 0
	for i := range 4 {
		j, _ := h.Journal(fmt.Sprintf("vm-%d", i))
		for _, e := range j {
			if e.Call == "Bootstrap" && e.Error == "" {
				ok++
			}
		}
	}
	if ok != 1 {
		t.Fatalf("%d successful bootstraps in the journals", ok)
	}
}

func TestQuorumLossStopsTheAPIServer(t *testing.T) {
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
	eventually(t, "three members", func() bool {
		n := 0
		for _, i := range h.Nodes() {
			if i.EtcdMember {
				n++
			}
		}
		return n == 3
	})
	for _, a := range cps[1:] {
		if err := h.SetFault(a, Fault{Unhealthy: "etcd"}); err != nil {
			t.Fatal(err)
		}
	}
	c := adminClient(t, secrets, cps[0])
	if s := services(t, ctx, c); s["kube-apiserver"].State == "Running" {
		t.Fatal("kube-apiserver runs without etcd quorum")
	}
	if _, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{}); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("member list without quorum: %v", err)
	}
	// Upgrading a control plane needs every member healthy.
	_, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.12.7"))
	if err == nil || !strings.Contains(err.Error(), "all members must be healthy to perform an upgrade") {
		t.Fatalf("upgrade without healthy etcd: %v", err)
	}
}

// bootWorker boots a worker at a, and a control plane of its cluster: a
// worker gets its API certificate from trustd on a control plane.
func bootWorker(t *testing.T, h *Host, secrets []byte, id, a string) {
	t.Helper()
	if err := h.Boot(id+"-cp", addr(h, 250), machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	if err := h.Boot(id, a, machineConfig(t, secrets, "worker", false)); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerWaitsForTrustd(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 5)
	if err := h.Boot("vm-w", a, machineConfig(t, secrets, "worker", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if _, err := c.Version(ctx); err == nil {
		t.Fatal("a worker without any control plane served its API")
	}
	if err := h.Boot("vm-cp", addr(h, 6), machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker's API", func() bool { _, err := c.Version(ctx); return err == nil })
}

func TestRebootGoesDownAndComesBack(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 3)
	bootWorker(t, h, secrets, "vm-r", a)
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := machineStatus(ctx, c)
	if err != nil || ms.Stage != runtime.MachineStageRebooting {
		t.Fatalf("right after Reboot: %+v %v", ms, err)
	}
	eventually(t, "connections refused", func() bool {
		conn, err := net.DialTimeout("tcp", a+":50000", time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	// The client backs off after the refusals: watch the boot from the host.
	eventually(t, "booting", func() bool {
		info, _ := h.Node(a)
		return info.Stage == runtime.MachineStageBooting && info.Reachable
	})
	eventually(t, "running and ready", func() bool {
		ms, err := machineStatus(ctx, c)
		return err == nil && ms.Stage == runtime.MachineStageRunning && ms.Status.Ready
	})
	j, _ := h.Journal("vm-r")
	if len(j) != 1 || j[0].Call != "Reboot" || j[0].Stage != "running" {
		t.Fatalf("journal: %+v", j)
	}
}

func TestUpgradeThenRollback(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 4)
	bootWorker(t, h, secrets, "vm-u", a)
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if err := c.Rollback(ctx); err == nil || !strings.Contains(err.Error(), "no previous Talos version") {
		t.Fatalf("rollback without a previous version: %v", err)
	}
	if _, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer:latest")); err == nil || !strings.Contains(err.Error(), "error validating installer image") {
		t.Fatalf("upgrade to an image without version: %v", err)
	}
	resp, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("127.0.0.1:5000/siderolabs/installer:v1.12.7"))
	if err != nil || resp.Messages[0].Ack != "Upgrade request received" {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if info, _ := h.Node(a); info.Stage != runtime.MachineStageUpgrading {
		t.Fatalf("stage after Upgrade: %s", info.Stage)
	}
	eventually(t, "new version", func() bool {
		v, err := c.Version(ctx)
		return err == nil && v.Messages[0].Version.Tag == "v1.12.7"
	})
	waitRunning(t, h, a)
	if err := c.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old version", func() bool {
		v, err := c.Version(ctx)
		return err == nil && v.Messages[0].Version.Tag == "v1.12.6"
	})
	info := waitRunning(t, h, a)
	if info.PreviousVersion != "v1.12.7" {
		t.Fatalf("previous version %q", info.PreviousVersion)
	}
	var calls []string
	j, _ := h.Journal(a)
	for _, e := range j {
		if e.Error == "" {
			calls = append(calls, e.Call+" "+e.Image)
		}
	}
	if want := []string{"Upgrade 127.0.0.1:5000/siderolabs/installer:v1.12.7", "Rollback "}; !slices.Equal(calls, want) {
		t.Fatalf("journal: %q, want %q", calls, want)
	}
}

func TestEtcdLeaveAndRemoveMember(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, _ := bootCluster(t, h, secrets, 3, 0)
	for _, a := range cps {
		waitRunning(t, h, a)
	}
	ctx := ctxT(t)
	c0 := adminClient(t, secrets, cps[0])
	if err := c0.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	members := func() []*machine.EtcdMember {
		t.Helper()
		l, err := c0.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Messages[0].Members
	}
	eventually(t, "three members", func() bool { return len(members()) == 3 })
	if err := adminClient(t, secrets, cps[2]).EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{}); err != nil {
		t.Fatal(err)
	}
	ms := members()
	if len(ms) != 2 || slices.ContainsFunc(ms, func(m *machine.EtcdMember) bool { return m.Hostname == "talos-vm-2" }) {
		t.Fatalf("after leave: %v", ms)
	}
	if err := c0.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: 12345}); err == nil || !strings.Contains(err.Error(), "member not found") {
		t.Fatalf("remove unknown member: %v", err)
	}
	if err := c0.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: ms[1].Id}); err != nil {
		t.Fatal(err)
	}
	if ms := members(); len(ms) != 1 || ms[0].Hostname != "talos-vm-0" {
		t.Fatalf("after remove: %v", ms)
	}
	// A node that left joins again when it boots again.
	if err := adminClient(t, secrets, cps[2]).Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rejoined after reboot", func() bool { i, _ := h.Node(cps[2]); return i.EtcdMember })
	j, _ := h.Journal(cps[0])
	if last := j[len(j)-1]; last.Call != "EtcdRemoveMemberByID" || last.MemberID != ms[1].Id || last.Error != "" {
		t.Fatalf("journal: %+v", j)
	}
}

// TestResetStopsTheKubelet: a node's kubelet stops when its reset
// begins, as Talos stops its services before it wipes the machine: the
// node leaves the cluster's kubelet reports for the whole reset, so that
// its Node, once deleted, is not registered again.
func TestResetStopsTheKubelet(t *testing.T) {
	h := openHostWith(t, "", Timings{Reset: time.Hour})
	secrets := bundle(t, "a")
	cps, ws := bootCluster(t, h, secrets, 1, 1)
	waitRunning(t, h, cps[0])
	waitRunning(t, h, ws[0])
	h.mu.Lock()
	cluster := h.lookup(ws[0]).cluster()
	worker := h.lookup(ws[0]).hostname()
	h.mu.Unlock()
	reported := func() []string {
		var out []string
		for _, n := range h.kubeNodes(cluster) {
			out = append(out, n.Name)
		}
		return out
	}
	if got := reported(); len(got) != 2 || !slices.Contains(got, worker) {
		t.Fatalf("kubelets of the running cluster: %v, want two with %s", got, worker)
	}
	if err := adminClient(t, secrets, ws[0]).ResetGeneric(ctxT(t), &machine.ResetRequest{Graceful: true}); err != nil {
		t.Fatal(err)
	}
	if info, _ := h.Node(ws[0]); info.Stage != runtime.MachineStageResetting {
		t.Fatalf("the worker is %s, want resetting", info.Stage)
	}
	if got := reported(); len(got) != 1 || slices.Contains(got, worker) {
		t.Fatalf("kubelets while the worker resets: %v, want the control plane's alone", got)
	}
}

// TestResetKeepsTheKubeletStoppedThroughItsReboot: the kubelet of a node
// being reset stays stopped after the resetting stage too, while the
// machine reboots (its config is still on disk until the wipe), as
// Talos's does not come back before the machine boots again.
func TestResetKeepsTheKubeletStoppedThroughItsReboot(t *testing.T) {
	h := openHostWith(t, "", Timings{Reset: 10 * time.Millisecond, Reboot: time.Hour})
	secrets := bundle(t, "a")
	cps, ws := bootCluster(t, h, secrets, 1, 1)
	waitRunning(t, h, cps[0])
	waitRunning(t, h, ws[0])
	h.mu.Lock()
	cluster, worker := h.lookup(ws[0]).cluster(), h.lookup(ws[0]).hostname()
	h.mu.Unlock()
	if err := adminClient(t, secrets, ws[0]).ResetGeneric(ctxT(t), &machine.ResetRequest{Graceful: true, Reboot: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker rebooting after its reset", func() bool {
		info, _ := h.Node(ws[0])
		return info.Stage == runtime.MachineStageRebooting
	})
	for _, n := range h.kubeNodes(cluster) {
		if n.Name == worker {
			t.Fatalf("the worker's kubelet reports it while the worker reboots from its reset: %+v", n)
		}
	}
}
