package test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
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

// TestMetalEndToEnd runs examples/metal's tenant on three bare-metal
// machines that wait in maintenance mode: each gets its config over the
// maintenance API (one through its pinned fingerprint) and installs; after
// a bootstrap, taking a control plane out resets it, and only after it
// left etcd.
func TestMetalEndToEnd(t *testing.T) {
	host, err := talosnode.Open(talosnode.Options{Dir: t.TempDir(), Timings: talosnode.Timings{
		Boot: 100 * time.Millisecond, Install: 100 * time.Millisecond, Reboot: 200 * time.Millisecond, Reset: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
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

	root := t.TempDir()
	e := &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(root, "data")}
	e.daemon.CreateBare("repo.git")
	e.repo = e.daemon.URL("repo.git")
	e.work = gittest.NewWorkdir(t, e.repo)
	tenant, err := examples.CloudFS.ReadFile("metal/tenant.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := e2eManifests + "/" + metalTenant
	e.work.Write(dir+"/tenant.yaml", string(tenant))
	e.work.Write(dir+"/nodegroups.yaml", metalNodeGroups(addrs, fp, 2))
	e.first = e.push("Tenant metal-lab on three machines")
	e.srv = newE2EServer(t, []string{
		"--data", e.data, "--repo", e.repo, "--path", e2eManifests,
		"--poll-interval", "300ms", "--debounce", "0s",
		"--tofu", testenv.Tofu(t), "--provider-mirror", testenv.ProviderMirror(t),
	})
	e.srv.start()

	c := e.srv.waitApplied(e.first)
	if r := e2eResult(t, c, metalTenant); c.Status.Phase != schema.CommitSucceeded || r.Plan.Add != 4 {
		t.Fatalf("first commit %s, plan %s (want +4: three machine records and the secrets): %s", c.Status.Phase, r.Plan, e2eBrief(c.Status))
	}
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

	t.Run("each machine got its config in maintenance mode", func(t *testing.T) {
		for i, a := range addrs {
			j, err := host.Journal(a)
			if err != nil || len(j) != 1 || j[0].Call != "ApplyConfiguration" || j[0].Stage != "maintenance" || j[0].Error != "" {
				t.Fatalf("journal of %s: %+v, %v; want one ApplyConfiguration in maintenance mode", a, j, err)
			}
			e.srv.waitFor(a+" installed and running", func() bool {
				n, _ := host.Node(a)
				return n.Stage == runtime.MachineStageRunning && n.Reachable && n.ConfigSHA256 == j[0].ConfigSHA256
			})
			if n, _ := host.Node(a); i < 2 && n.Hostname != fmt.Sprintf("lab-cp-%d", i+1) {
				t.Errorf("%s runs as %q, want its host name from the manifest", a, n.Hostname)
			}
		}
	})

	// The cluster forms: one bootstrap, with the tenant's talosconfig.
	code, tc := e.srv.request(http.MethodGet, "/api/v1/tenants/"+metalTenant+"/talosconfig", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("talosconfig: %d %s", code, tc)
	}
	cfg, err := clientconfig.FromBytes(tc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	cp1, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(addrs[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer cp1.Close()
	if err := cp1.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	e.srv.waitFor("both control planes in etcd", func() bool {
		a, _ := host.Node(addrs[0])
		b, _ := host.Node(addrs[1])
		return a.EtcdMember && b.EtcdMember
	})

	t.Run("a control plane taken out leaves etcd, then is reset", func(t *testing.T) {
		e.work.Write(dir+"/nodegroups.yaml", metalNodeGroups(addrs, fp, 1))
		c := e.srv.waitApplied(e.push("One control plane\n\nRezuscloud-Allow-Deletions: 1\n"))
		if r := e2eResult(t, c, metalTenant); c.Status.Phase != schema.CommitSucceeded || r.Plan.Destroy != 1 || r.Plan.Add != 0 {
			t.Fatalf("scale-down %s, plan %s (want -1): %s", c.Status.Phase, r.Plan, e2eBrief(c.Status))
		}
		j, _ := host.Journal(addrs[1])
		var calls []string
		for _, e := range j {
			if e.Error == "" {
				calls = append(calls, e.Call)
			}
		}
		if strings.Join(calls, ",") != "ApplyConfiguration,EtcdLeaveCluster,Reset" || !j[len(j)-1].Graceful {
			t.Fatalf("journal of the removed control plane: %+v; want its config, leaving etcd, then a graceful reset", j)
		}
		l, err := cp1.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil || len(l.Messages[0].Members) != 1 || l.Messages[0].Members[0].Hostname != "lab-cp-1" {
			t.Fatalf("etcd members after the scale-down: %v, %v", l, err)
		}
		if ms := e.srv.tenantMachines(metalTenant); len(ms) != 2 {
			t.Errorf("%d machines after the scale-down, want 2", len(ms))
		}
		e.srv.waitFor("the removed machine back in maintenance mode", func() bool {
			n, _ := host.Node(addrs[1])
			return n.Stage == runtime.MachineStageMaintenance && n.ConfigSHA256 == ""
		})
		for _, a := range []string{addrs[0], addrs[2]} {
			j, _ := host.Journal(a)
			for _, e := range j {
				if e.Call == "Reset" || e.Call == "EtcdLeaveCluster" || (e.Call == "ApplyConfiguration" && e != j[0]) {
					t.Errorf("journal of %s, which stays: %+v", a, j)
				}
			}
		}
	})
}
