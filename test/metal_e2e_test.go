package test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

const metalTenant = "metal-lab"

// metalNodeGroups lists two control planes (the second with its pinned
// maintenance fingerprint) and a worker, at addrs.
func metalNodeGroups(addrs []string, fingerprint string, cps int) string {
	return fmt.Sprintf(`apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: controlplane
  labels:
    rezuscloud.io/tenant: metal-lab
    rezuscloud.io/role: controlplane
spec:
  count: %d
  providerClass: metal
  providerConfig:
    installDisk: /dev/nvme0n1
    machines:
      - address: %s
        hostname: lab-cp-1
      - address: %s
        hostname: lab-cp-2
        fingerprint: %s
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: metal-lab
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: metal
  providerConfig:
    machines:
      - address: %s
`, cps, addrs[0], addrs[1], fingerprint, addrs[2])
}

// metalCalls returns the write calls the node at address accepted.
func metalCalls(t *testing.T, host *talosnode.Host, address string, calls ...string) []talosnode.JournalEntry {
	t.Helper()
	j, err := host.Journal(address)
	if err != nil {
		t.Fatalf("journal of %s: %v", address, err)
	}
	var out []talosnode.JournalEntry
	for _, e := range j {
		if e.Error == "" && (len(calls) == 0 || slices.Contains(calls, e.Call)) {
			out = append(out, e)
		}
	}
	return out
}

func callNames(j []talosnode.JournalEntry) string {
	var out []string
	for _, e := range j {
		out = append(out, e.Call)
	}
	return strings.Join(out, ",")
}

// metalPatch is a ConfigPatch of the metal tenant.
const metalPatch = `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: somaxconn
  labels:
    rezuscloud.io/tenant: metal-lab
spec:
  patch: |
    machine:
      sysctls:
        net.core.somaxconn: "65535"
`

// newMetalRepo returns an e2e whose repository holds examples/metal's
// tenant with nodegroups, not pushed yet, and the tenant's directory in it.
func newMetalRepo(t *testing.T, nodegroups string) (*e2e, string) {
	t.Helper()
	e := &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(t.TempDir(), "data")}
	e.daemon.CreateBare("repo.git")
	e.repo = e.daemon.URL("repo.git")
	e.work = gittest.NewWorkdir(t, e.repo)
	tenant, err := examples.CloudFS.ReadFile("metal/tenant.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := e2eManifests + "/" + metalTenant
	e.work.Write(dir+"/tenant.yaml", string(tenant))
	e.work.Write(dir+"/nodegroups.yaml", nodegroups)
	return e, dir
}

// metalServer is the server of a metal e2e: no simulated cloud (the test
// runs the machines), a poll every 300 ms, no debounce, probes every
// 300 ms, a short Talos timeout, and args.
func metalServer(e *e2e, args ...string) servertest.Options {
	return servertest.Options{
		Data: e.data, Repo: e.repo, Path: e2eManifests,
		Args: append([]string{"--poll-interval", "300ms", "--debounce", "0s", "--probe-ttl", "300ms", "--talos-timeout", "5s"}, args...),
	}
}

// startMetalMachines opens a node host with o and short stage times, closed
// when the test ends, and starts three bare-metal machines in maintenance
// mode. It returns their addresses and the second one's certificate
// fingerprint.
func startMetalMachines(t *testing.T, o talosnode.Options) (*talosnode.Host, []string, string) {
	t.Helper()
	o.Dir = t.TempDir()
	o.Timings = talosnode.Timings{Boot: 100 * time.Millisecond, Install: 100 * time.Millisecond, Reboot: 200 * time.Millisecond, Reset: 100 * time.Millisecond}
	host, err := talosnode.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	var addrs []string
	for i := range 3 {
		a := netip.AddrFrom4([4]byte{127, byte(host.Block()), 9, byte(i + 1)}).String()
		if err := host.StartMaintenance(a); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	fp, err := host.MaintenanceFingerprint(addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	return host, addrs, fp
}

// TestMetalEndToEnd runs examples/metal's tenant on three bare-metal
// machines that wait in maintenance mode: each gets its config over the
// maintenance API (one through its pinned fingerprint) and installs; the
// server bootstraps etcd once and rolls a patch through the machines in
// place, each keeping its host name; taking a control plane out resets
// it, and only after it left etcd.
func TestMetalEndToEnd(t *testing.T) {
	host, addrs, fp := startMetalMachines(t, talosnode.Options{})
	e, dir := newMetalRepo(t, metalNodeGroups(addrs, fp, 2))
	e.first = e.push("Tenant metal-lab on three machines")
	e.srv = newE2EServer(t, metalServer(e, "--talos-wait", "30s", "--allow-loopback-metal"))
	e.srv.Start()

	c := e.srv.waitApplied(e.first)
	if r := e2eResult(t, c, metalTenant); c.Status.Phase != schema.CommitSucceeded || r.Plan.Add != 4 || r.Plan.Text() != "machines +3, other +1" {
		t.Fatalf("first commit %s, plan %s (%s; want +4: three machine records and the secrets): %s", c.Status.Phase, r.Plan, r.Plan.Text(), e2eBrief(c.Status))
	}
	t.Run("the server warned once of each machine without a pinned fingerprint", func(t *testing.T) {
		for i, a := range addrs {
			want := 1
			if i == 1 {
				want = 0 // pinned
			}
			n := 0
			for _, line := range strings.Split(e.srv.Log(), "\n") {
				if strings.Contains(line, "without a pinned fingerprint") && strings.Contains(line, "revision="+e.first) &&
					strings.Contains(line, "address="+a+" ") {
					n++
				}
			}
			if n != want {
				t.Errorf("%d warnings about %s for the first commit, want %d", n, a, want)
			}
		}
	})
	ms := e.srv.tenantMachines(metalTenant)
	byAddr := map[string]schema.Machine{}
	for _, m := range ms {
		byAddr[m.Spec.ManagementAddress] = m
	}
	for _, a := range addrs {
		if m, ok := byAddr[a]; !ok || m.Spec.ProviderClass != "metal" {
			t.Fatalf("machines %v: none on metal at %s", ms, a)
		}
	}
	hostnames := []string{"lab-cp-1", "lab-cp-2", ""}

	t.Run("each machine got its config in maintenance mode", func(t *testing.T) {
		for i, a := range addrs {
			j := metalCalls(t, host, a, "ApplyConfiguration")
			if len(j) != 1 || j[0].Stage != "maintenance" {
				t.Fatalf("journal of %s: %+v; want one ApplyConfiguration in maintenance mode", a, j)
			}
			e.srv.WaitFor(a+" installed and running", func() bool {
				n, _ := host.Node(a)
				return n.Stage == runtime.MachineStageRunning && n.Reachable && n.ConfigSHA256 == j[0].ConfigSHA256
			})
			if n, _ := host.Node(a); hostnames[i] != "" && n.Hostname != hostnames[i] {
				t.Errorf("%s runs as %q, want its host name from the manifest", a, n.Hostname)
			}
		}
	})

	// The cluster forms: the server bootstraps etcd, once, on the first
	// control plane.
	e.srv.WaitFor("both control planes in etcd", func() bool {
		a, _ := host.Node(addrs[0])
		b, _ := host.Node(addrs[1])
		return a.EtcdMember && b.EtcdMember
	})
	// The observer records what it probes after the bootstrap: the plane
	// compares the machines' configs with its own, so each comes up to
	// date (and never does if the comparison is wrong).
	e.srv.WaitFor("every machine's configUpToDate", func() bool {
		ms := e.srv.tenantMachines(metalTenant)
		for _, m := range ms {
			if !m.Status.ConfigUpToDate {
				return false
			}
		}
		return len(ms) == len(addrs)
	})
	// Each machine's inventory is the metal machine's: its NVMe disk,
	// where Talos was installed, and a spinning data disk.
	e.srv.WaitFor("every machine's hardware", func() bool {
		for _, m := range e.srv.tenantMachines(metalTenant) {
			if d, ok := inventoryDisk(m, "nvme0n1"); !ok || !d.SystemDisk {
				return false
			}
		}
		return true
	})
	for _, m := range e.srv.tenantMachines(metalTenant) {
		hw := m.Status.Hardware
		if d, ok := inventoryDisk(m, "sda"); hw.CPUs != 8 || hw.MemoryMiB != 32<<10 || !ok || !d.Rotational || d.SystemDisk {
			t.Errorf("%s: %d CPUs, %d MiB, disks %+v; want 8, 32 GiB and a data disk sda", m.Spec.ManagementAddress, hw.CPUs, hw.MemoryMiB, hw.BlockDevices)
		}
	}
	t.Run("the server bootstrapped etcd once, on the first control plane", func(t *testing.T) {
		for i, a := range addrs {
			want := 0
			if i == 0 {
				want = 1
			}
			if j := metalCalls(t, host, a, "Bootstrap"); len(j) != want || (want == 1 && j[0].Stage != "running") {
				t.Errorf("%s got Bootstrap %d times (%+v), want %d", a, len(j), j, want)
			}
		}
	})
	cp1 := planeTalosClient(t, e, metalTenant, addrs[0])
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()

	t.Run("a patch rolls through the machines in place, each keeping its host name", func(t *testing.T) {
		before := map[string]string{}
		for _, a := range addrs {
			n, _ := host.Node(a)
			before[a] = n.ConfigSHA256
		}
		e.work.Write(dir+"/patches.yaml", metalPatch)
		c := e.srv.waitApplied(e.push("metal-lab: a sysctl on every machine"))
		if r := e2eResult(t, c, metalTenant); c.Status.Phase != schema.CommitSucceeded || r.Plan.Add != 0 || r.Plan.Destroy != 0 {
			t.Fatalf("patch %s, plan %s (want no machine replaced): %s", c.Status.Phase, r.Plan, e2eBrief(c.Status))
		}
		var last time.Time
		for i, a := range addrs {
			j := metalCalls(t, host, a, "ApplyConfiguration")
			if len(j) != 2 || j[1].Stage != "running" || j[1].ConfigSHA256 == before[a] {
				t.Fatalf("journal of %s: %+v; want its maintenance config, then one apply of the patched config while running", a, j)
			}
			if !j[1].Time.After(last) {
				t.Errorf("%s got the patch at %v, before the machine ahead of it (%v): control planes first, one at a time", a, j[1].Time, last)
			}
			last = j[1].Time
			n, _ := host.Node(a)
			if n.ConfigSHA256 != j[1].ConfigSHA256 || (hostnames[i] != "" && n.Hostname != hostnames[i]) {
				t.Errorf("%s runs config %.12s as %q; want %.12s as %q", a, n.ConfigSHA256, n.Hostname, j[1].ConfigSHA256, hostnames[i])
			}
			mc, err := safe.StateGet[*config.MachineConfig](ctx, planeTalosClient(t, e, metalTenant, a).COSI, config.NewMachineConfig(nil).Metadata())
			if err != nil {
				t.Fatalf("%s: running config: %v", a, err)
			}
			if b, _ := mc.Provider().Bytes(); !strings.Contains(string(b), `net.core.somaxconn: "65535"`) {
				t.Errorf("%s: the running config lacks the patch", a)
			}
		}
		if j := metalCalls(t, host, addrs[0], "Bootstrap"); len(j) != 1 {
			t.Errorf("%d bootstraps after the patch, want 1", len(j))
		}
	})

	t.Run("a control plane taken out leaves etcd, then is reset", func(t *testing.T) {
		e.work.Write(dir+"/nodegroups.yaml", metalNodeGroups(addrs, fp, 1))
		c := e.srv.waitApplied(e.push("One control plane\n\nRezuscloud-Allow-Deletions: 1\n"))
		if r := e2eResult(t, c, metalTenant); c.Status.Phase != schema.CommitSucceeded || r.Plan.Destroy != 1 || r.Plan.Add != 0 {
			t.Fatalf("scale-down %s, plan %s (want -1): %s", c.Status.Phase, r.Plan, e2eBrief(c.Status))
		}
		j := metalCalls(t, host, addrs[1])
		if callNames(j) != "ApplyConfiguration,ApplyConfiguration,EtcdLeaveCluster,Reset" || !j[len(j)-1].Graceful {
			t.Fatalf("journal of the removed control plane: %+v; want its configs, leaving etcd, then a graceful reset", j)
		}
		l, err := cp1.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil || len(l.Messages[0].Members) != 1 || l.Messages[0].Members[0].Hostname != "lab-cp-1" {
			t.Fatalf("etcd members after the scale-down: %v, %v", l, err)
		}
		if ms := e.srv.tenantMachines(metalTenant); len(ms) != 2 {
			t.Errorf("%d machines after the scale-down, want 2", len(ms))
		}
		e.srv.WaitFor("the removed machine back in maintenance mode", func() bool {
			n, _ := host.Node(addrs[1])
			return n.Stage == runtime.MachineStageMaintenance && n.ConfigSHA256 == ""
		})
		for _, a := range []string{addrs[0], addrs[2]} {
			if j := metalCalls(t, host, a, "Reset", "EtcdLeaveCluster", "ApplyConfiguration"); callNames(j) != "ApplyConfiguration,ApplyConfiguration" {
				t.Errorf("journal of %s, which stays: %+v", a, j)
			}
		}
	})
}

// metalPair is a control plane and a worker at addrs; extra lists more
// workers (and raises the count to match).
func metalPair(addrs []string, extra string) string {
	count := 1 + strings.Count(extra, "- address:")
	return fmt.Sprintf(`apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: controlplane
  labels:
    rezuscloud.io/tenant: metal-lab
    rezuscloud.io/role: controlplane
spec:
  count: 1
  providerClass: metal
  providerConfig:
    machines:
      - address: %s
        hostname: lab-cp-1
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: metal-lab
    rezuscloud.io/role: worker
spec:
  count: %d
  providerClass: metal
  providerConfig:
    machines:
      - address: %s
        hostname: lab-w-1
%s`, addrs[0], count, addrs[1], extra)
}

// TestMetalMachineInMaintenanceLater: a metal machine that reaches
// maintenance mode when no run is due gets its config all the same: one
// powered on while its tenant waits for a long retry backoff (the
// observer sees it and the retry runs now), and one reinstalled after its
// tenant was applied (the next commit, which changes nothing of the
// tenant, configures it without tofu). A machine that never left
// maintenance mode (its pinned fingerprint is another's) is taken out
// without a reset: it has nothing to reset.
func TestMetalMachineInMaintenanceLater(t *testing.T) {
	host, err := talosnode.Open(talosnode.Options{Dir: t.TempDir(), Timings: talosnode.Timings{
		Boot: 100 * time.Millisecond, Install: 100 * time.Millisecond, Reboot: 200 * time.Millisecond, Reset: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	addrs := []string{
		netip.AddrFrom4([4]byte{127, byte(host.Block()), 9, 1}).String(),
		netip.AddrFrom4([4]byte{127, byte(host.Block()), 9, 2}).String(),
		netip.AddrFrom4([4]byte{127, byte(host.Block()), 9, 3}).String(),
	}
	for _, a := range []string{addrs[0], addrs[2]} {
		if err := host.StartMaintenance(a); err != nil {
			t.Fatal(err)
		}
	}
	wrongPin, err := host.MaintenanceFingerprint(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	e, dir := newMetalRepo(t, metalPair(addrs, ""))
	first := e.push("Tenant metal-lab; its worker is still off")
	o := metalServer(e, "--talos-wait", "5s", "--retry-base", "1h", "--retry-max", "1h")
	o.Env = []string{"REZUSCLOUD_ALLOW_LOOPBACK_METAL=true"}
	e.srv = newE2EServer(t, o)
	e.srv.Start()

	e.srv.WaitFor("the first run to wait for a retry", func() bool {
		c, ok := e.srv.Commit(first)
		return ok && c.Status.Phase.Done()
	})
	if c := e.srv.WaitCommit(first); c.Status.Phase == schema.CommitSucceeded {
		t.Fatalf("the first commit succeeded with its worker off: %s", e2eBrief(c.Status))
	}
	configured := func(what, address, hostname string, applies int) {
		t.Helper()
		e.srv.WaitFor(what, func() bool {
			n, _ := host.Node(address)
			j := metalCalls(t, host, address, "ApplyConfiguration")
			return len(j) == applies && n.Stage == runtime.MachineStageRunning && n.Reachable &&
				n.ConfigSHA256 == j[len(j)-1].ConfigSHA256 && n.Hostname == hostname
		})
	}

	t.Run("a machine powered on during a retry backoff gets its config", func(t *testing.T) {
		// The control plane got its config in the first run; once it has
		// installed and rebooted, the worker is powered on. (A run that
		// meets a machine in the middle of its install fails and waits for
		// its backoff like any failed run.)
		configured("the control plane installed", addrs[0], "lab-cp-1", 1)
		if err := host.StartMaintenance(addrs[1]); err != nil {
			t.Fatal(err)
		}
		configured("the worker configured long before its retry was due", addrs[1], "lab-w-1", 1)
		e.srv.WaitFor("the first commit amended to succeeded", func() bool {
			c, ok := e.srv.Commit(first)
			return ok && c.Status.Phase == schema.CommitSucceeded
		})
		if j := metalCalls(t, host, addrs[0], "Bootstrap"); len(j) != 1 {
			t.Fatalf("%d bootstraps of the control plane, want 1", len(j))
		}
	})

	t.Run("a machine back in maintenance mode gets its config from the next commit", func(t *testing.T) {
		n, _ := host.Node(addrs[1])
		if err := host.Remove(n.ID); err != nil {
			t.Fatal(err)
		}
		if err := host.StartMaintenance(addrs[1]); err != nil {
			t.Fatal(err)
		}
		e.srv.WaitFor("the worker shown in maintenance mode", func() bool {
			for _, m := range e.srv.tenantMachines(metalTenant) {
				if m.Spec.ManagementAddress == addrs[1] {
					return m.Status.Stage == schema.StageMaintenance
				}
			}
			return false
		})
		e.work.Write("README.md", "Nothing of the tenants changes.\n")
		c := e.srv.waitApplied(e.push("A commit that changes no tenant"))
		if r := e2eResult(t, c, metalTenant); r.OutputTail != "" {
			t.Errorf("tofu ran for an unchanged tenant: %s", r.OutputTail)
		}
		configured("the reinstalled worker configured again", addrs[1], "lab-w-1", 1)
	})

	t.Run("a machine that never left maintenance mode is taken out without a reset", func(t *testing.T) {
		e.work.Write(dir+"/nodegroups.yaml", metalPair(addrs, "      - address: "+addrs[2]+"\n        fingerprint: "+wrongPin+"\n"))
		added := e.push("A worker whose pinned fingerprint is another machine's")
		e.srv.WaitFor("the run to wait for the unconfigured worker", func() bool {
			c, ok := e.srv.Commit(added)
			return ok && c.Status.Phase.Done()
		})
		if c := e.srv.WaitCommit(added); c.Status.Phase == schema.CommitSucceeded {
			t.Fatalf("the commit succeeded with a worker in maintenance mode: %s", e2eBrief(c.Status))
		}
		if n, _ := host.Node(addrs[2]); n.Stage != runtime.MachineStageMaintenance {
			t.Fatalf("%s left maintenance mode (%s) through a pin that is not its own", addrs[2], n.Stage)
		}
		e.work.Write(dir+"/nodegroups.yaml", metalPair(addrs, ""))
		c := e.srv.waitApplied(e.push("Without that worker\n\nRezuscloud-Allow-Deletions: 1\n"))
		if r := e2eResult(t, c, metalTenant); r.Plan.Destroy != 1 {
			t.Fatalf("plan %s, want its record destroyed", r.Plan)
		}
		if j := metalCalls(t, host, addrs[2]); len(j) != 0 {
			t.Fatalf("journal of the machine taken out: %+v; want nothing", j)
		}
		if ms := e.srv.tenantMachines(metalTenant); len(ms) != 2 {
			t.Errorf("%d machines, want 2", len(ms))
		}
	})
}
