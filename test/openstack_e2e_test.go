package test

import (
	"bufio"
	"bytes"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/examples"
	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/schema"
)

// osE2E is `rezuscloud serve --sim-openstack DIR` reconciling a repository
// that holds examples/openstack (tenant openstack-prod) under
// clusters/openstack-prod/, with tofu wrapped so that every argv it is
// started with is logged.
type osE2E struct {
	*e2e
	cloud   string // the simulated OpenStack's directory
	argvLog string
	block   netip.Prefix
	seen    int // journal lines already looked at
}

const osTenant = "openstack-prod"

func newOSE2E(t *testing.T, block string) *osE2E {
	t.Helper()
	root := t.TempDir()
	o := &osE2E{cloud: filepath.Join(root, "openstack"), argvLog: filepath.Join(root, "tofu-argv.log"), block: netip.MustParsePrefix(block)}
	o.e2e = &e2e{t: t, daemon: gittest.NewDaemon(t), data: filepath.Join(root, "data")}
	o.daemon.CreateBare("repo.git")
	o.repo = o.daemon.URL("repo.git")
	o.work = gittest.NewWorkdir(t, o.repo)
	err := fs.WalkDir(examples.CloudFS, "openstack", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(examples.CloudFS, p)
		o.work.Write(e2eManifests+"/"+osTenant+"/"+filepath.Base(p), string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	o.work.Write(e2eManifests+"/README.md", "# Clusters\n")
	o.first = o.push("Tenant openstack-prod on OpenStack")

	// The wrapper logs each argv (NUL-separated, one run per line) and
	// whether the clouds file reached tofu through its environment.
	wrapper := filepath.Join(root, "tofu")
	script := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >> '" + o.argvLog + "'\n" +
		"printf ' OS_CLIENT_CONFIG_FILE=%s\\n' \"$OS_CLIENT_CONFIG_FILE\" >> '" + o.argvLog + "'\n" +
		"exec '" + testenv.Tofu(t) + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o.srv = newE2EServer(t, servertest.Options{
		Data: o.data, Repo: o.repo, Path: e2eManifests, Tofu: wrapper, SimCloud: true,
		Args: append([]string{
			"--poll-interval", "300ms", "--debounce", "0s",
			"--sim-openstack", o.cloud, "--sim-openstack-addresses", block,
			"--retry-base", "1s", "--retry-max", "5s",
		}, planeArgs()...),
	})
	o.srv.Start()
	return o
}

// journal returns the simulated OpenStack's requests since the last call,
// as "METHOD PATH".
func (o *osE2E) journal() []string {
	o.t.Helper()
	b, err := os.ReadFile(filepath.Join(o.cloud, "journal.log"))
	if err != nil {
		o.t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		n++
		if n <= o.seen {
			continue
		}
		f := strings.Fields(sc.Text())
		out = append(out, f[0]+" "+f[1])
	}
	o.seen = n
	return out
}

var serverPath = regexp.MustCompile(`^/compute/v2\.1/servers/([0-9a-f-]{36})$`)

// count counts the requests of method on exactly path.
func count(reqs []string, method, path string) int {
	n := 0
	for _, r := range reqs {
		if r == method+" "+path {
			n++
		}
	}
	return n
}

// deletedServers returns the IDs of the servers the requests deleted.
func deletedServers(reqs []string) []string {
	var ids []string
	for _, r := range reqs {
		if m, ok := strings.CutPrefix(r, "DELETE "); ok {
			if s := serverPath.FindStringSubmatch(m); s != nil {
				ids = append(ids, s[1])
			}
		}
	}
	sort.Strings(ids)
	return ids
}

func (o *osE2E) machineIDs() map[string]string {
	return e2eMachineIDs(o.srv.tenantMachines(osTenant))
}

// TestOpenStackEndToEnd runs a tenant through its life on the simulated
// OpenStack: apply, scale up, scale down, a config patch, a 500 from Nova
// and the retry that applies the change after it,
// removal; and checks that the cloud's credentials never leave the clouds
// file.
func TestOpenStackEndToEnd(t *testing.T) {
	o := newOSE2E(t, "127.3.0.0/16")
	c := o.srv.waitApplied(o.first)
	if r := e2eResult(t, c, osTenant); r.Plan.Add != 11 {
		t.Errorf("first apply plan %s, want +11 (5 servers, 3 ports, 2 server groups, the secrets)", r.Plan)
	}
	ms := o.srv.tenantMachines(osTenant)
	if len(ms) != 5 {
		t.Fatalf("%d machines, want 5", len(ms))
	}
	for _, m := range ms {
		a, err := netip.ParseAddr(m.Spec.ManagementAddress)
		if err != nil || !o.block.Contains(a) || m.Spec.ProviderClass != "openstack" || m.Metadata.Labels["topology.kubernetes.io/zone"] != "nova" {
			t.Errorf("machine %s: address %q, class %q, labels %v; want an address of %s on openstack in zone nova",
				m.Metadata.Name, m.Spec.ManagementAddress, m.Spec.ProviderClass, m.Metadata.Labels, o.block)
		}
	}
	if j := o.journal(); count(j, "POST", "/compute/v2.1/servers") != 5 || count(j, "POST", "/network/v2.0/ports") != 3 {
		t.Errorf("first apply: %d server and %d port creates, want 5 and 3", count(j, "POST", "/compute/v2.1/servers"), count(j, "POST", "/network/v2.0/ports"))
	}
	t.Run("servers boot as Talos nodes with their user data", func(t *testing.T) {
		for _, m := range ms {
			o.checkTalosNode(t, m)
		}
	})

	t.Run("the Talos plane bootstraps the cluster once, and it becomes ready", func(t *testing.T) {
		planeWaitReady(t, o.e2e, osTenant)
		if got := planeBootstraps(t, o.e2e, osTenant); len(got) != 1 || !strings.Contains(got[0], "controlplane") {
			t.Errorf("bootstraps on %v, want one on a control plane", got)
		}
	})

	t.Run("each machine's inventory is its flavor's", func(t *testing.T) {
		o.srv.WaitFor("every machine's hardware", func() bool {
			for _, m := range o.srv.tenantMachines(osTenant) {
				if m.Status.Hardware == nil {
					return false
				}
			}
			return true
		})
		for _, m := range o.srv.tenantMachines(osTenant) {
			cpus, mem, disk := 4, 8192, uint64(40)<<30 // m1.medium
			if m.Spec.Role == schema.RoleWorker {
				cpus, mem, disk = 8, 16384, uint64(80)<<30 // m1.large
			}
			hw := m.Status.Hardware
			if d, ok := inventoryDisk(m, "vda"); hw.CPUs != cpus || hw.MemoryMiB != mem || !ok || d.SizeBytes != disk {
				t.Errorf("%s (%s): %d CPUs, %d MiB, disks %+v; want %d, %d and vda of %d bytes", m.Spec.TFAddress, m.Spec.Shape, hw.CPUs, hw.MemoryMiB, hw.BlockDevices, cpus, mem, disk)
			}
		}
	})

	t.Run("scale up creates exactly the new servers", func(t *testing.T) {
		before := o.machineIDs()
		o.setCount(osTenant, "workers", 4)
		o.srv.waitApplied(o.push("Scale workers to 4"))
		j := o.journal()
		if n := count(j, "POST", "/compute/v2.1/servers"); n != 2 || len(deletedServers(j)) != 0 {
			t.Errorf("scale-up: %d creates and deletes %v, want 2 and none", n, deletedServers(j))
		}
		after := o.machineIDs()
		e2eSameIDs(t, "scale-up", before, after)
		if len(after) != 7 {
			t.Errorf("%d machines after scale-up, want 7", len(after))
		}
	})

	t.Run("scale down deletes exactly the removed servers", func(t *testing.T) {
		before := o.machineIDs()
		addrs := map[string]string{}
		for _, m := range o.srv.tenantMachines(osTenant) {
			addrs[m.Metadata.Name] = m.Spec.ManagementAddress
		}
		o.setCount(osTenant, "workers", 1)
		o.srv.waitApplied(o.push("Scale workers to 1\n\nRezuscloud-Allow-Deletions: 3\n"))
		j := o.journal()
		after := o.machineIDs()
		var removed []string
		for id := range before {
			if _, ok := after[id]; !ok {
				removed = append(removed, id)
			}
		}
		sort.Strings(removed)
		if got := deletedServers(j); len(removed) != 3 || strings.Join(got, ",") != strings.Join(removed, ",") || count(j, "POST", "/compute/v2.1/servers") != 0 {
			t.Errorf("scale-down deleted %v, the API lost %v; want the same 3 and no create", got, removed)
		}
		for _, id := range removed {
			addr := addrs[id]
			if conn, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "50000"), time.Second); err == nil {
				conn.Close()
				t.Errorf("deleted server %s still answers on %s:50000", id, addr)
			}
		}
	})

	t.Run("a config patch replaces nothing", func(t *testing.T) {
		before := o.machineIDs()
		o.edit(e2eManifests+"/"+osTenant+"/patches.yaml", "time.cloudflare.com", "time.google.com")
		c := o.srv.waitApplied(o.push("NTP from Google"))
		j := o.journal()
		for _, r := range j {
			if strings.HasPrefix(r, "DELETE ") || r == "POST /compute/v2.1/servers" {
				t.Errorf("a config patch sent %s", r)
			}
		}
		if r := e2eResult(t, c, osTenant); r.Plan.Add != 0 || r.Plan.Destroy != 0 || r.Plan.Change == 0 {
			t.Errorf("config patch plan %s, want in-place changes only (the config hash in metadata)", r.Plan)
		}
		e2eSameIDs(t, "config patch", before, o.machineIDs())
		// The plane applied the patch in place, each server once,
		// control planes first and one at a time.
		planeWaitReady(t, o.e2e, osTenant)
		applies := planeCalls(t, o.e2e, osTenant, "ApplyConfiguration")
		if len(applies) != len(before) {
			t.Fatalf("%d config applies, want one on each of the %d servers: %+v", len(applies), len(before), applies)
		}
		planeCheckOneAtATime(t, applies, 0)
	})

	t.Run("a Talos upgrade rolls the servers in place, one at a time", func(t *testing.T) {
		before := o.machineIDs()
		o.edit(e2eManifests+"/"+osTenant+"/tenant.yaml", `talosVersion: "1.12.6"`, `talosVersion: "1.12.7"`)
		o.srv.waitApplied(o.push("Talos 1.12.7"))
		for _, r := range o.journal() {
			if strings.HasPrefix(r, "DELETE ") || r == "POST /compute/v2.1/servers" {
				t.Errorf("an upgrade sent %s", r)
			}
		}
		e2eSameIDs(t, "upgrade", before, o.machineIDs())
		ups := planeCalls(t, o.e2e, osTenant, "Upgrade")
		if len(ups) != len(before) {
			t.Fatalf("%d upgrades, want one on each of the %d servers: %+v", len(ups), len(before), ups)
		}
		for _, u := range ups {
			if u.Image != "ghcr.io/siderolabs/installer:v1.12.7" {
				t.Errorf("%s upgraded to %q", u.Machine, u.Image)
			}
		}
		planeCheckOneAtATime(t, ups, planeUpgrade+planeReboot)
		o.srv.WaitFor("every server on Talos v1.12.7", func() bool {
			for _, m := range o.srv.tenantMachines(osTenant) {
				if m.Status.TalosVersion != "v1.12.7" || !m.Status.Ready {
					return false
				}
			}
			return true
		})
	})

	t.Run("a 500 from Nova fails the tenant with one line, and a retry applies it", func(t *testing.T) {
		if err := openstack.WriteFaults(o.cloud, openstack.Faults{HTTP: []openstack.Fault{{Method: "POST", Path: "/compute/v2.1/servers"}}}); err != nil {
			t.Fatal(err)
		}
		o.setCount(osTenant, "workers", 2)
		sha := o.push("Scale workers to 2, into a Nova fault")
		c := o.srv.WaitCommit(sha)
		r := e2eResult(t, c, osTenant)
		if c.Status.Phase != schema.CommitFailed || r.Phase != schema.CommitFailed {
			t.Fatalf("commit %s, tenant %s; want both Failed", c.Status.Phase, r.Phase)
		}
		if strings.Contains(r.Error, "\n") || !strings.Contains(r.Error, "500") {
			t.Errorf("tenant error is not one line naming the 500: %q", r.Error)
		}
		if r.Reason != schema.ReasonTofuFailed || r.NextAttemptAt.IsZero() {
			t.Errorf("the failed tenant has reason %q and next attempt %v, want TofuFailed and a retry", r.Reason, r.NextAttemptAt)
		}
		o.srv.WaitFor("the retry to apply the scale-up", func() bool {
			c, _ = o.srv.Commit(sha)
			return c.Status.Phase == schema.CommitSucceeded
		})
		if n := len(o.machineIDs()); n != 5 {
			t.Errorf("%d machines after the retry, want 5 (3 control planes, 2 workers)", n)
		}
		// The create that met the 500 and the one of the retry.
		if j := o.journal(); count(j, "POST", "/compute/v2.1/servers") != 2 || len(deletedServers(j)) != 0 {
			t.Errorf("fault and retry: %d server creates and deletes %v, want 2 and none", count(j, "POST", "/compute/v2.1/servers"), deletedServers(j))
		}
		var tn schema.Tenant
		o.srv.mustGet("/api/v1/tenants/"+osTenant, &tn)
		if tn.Status.Retry != nil || tn.Status.ObservedCommit != sha {
			t.Errorf("%s after the retry: retry %+v, observed commit %s, want no retry and %s", osTenant, tn.Status.Retry, tn.Status.ObservedCommit, sha)
		}
	})

	t.Run("removing the tenant deletes every server and port", func(t *testing.T) {
		o.work.Remove(e2eManifests + "/" + osTenant)
		o.srv.waitApplied(o.push("Remove openstack-prod\n\nRezuscloud-Allow-Deletions: 1\n"))
		st, err := os.ReadFile(filepath.Join(o.cloud, "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{`"servers"`, `"ports"`, `"serverGroups"`} {
			if !strings.Contains(string(st), kind+": {}") {
				t.Errorf("after removal the cloud still holds %s:\n%s", kind, st)
			}
		}
		if ms := o.srv.machines(""); len(ms) != 0 {
			t.Errorf("%d machines left in the API", len(ms))
		}
	})

	o.checkNoCredentialLeak(t)
}

// checkTalosNode checks that machine m answers as a Talos node booted with
// its user data: its Talos API accepts the tenant's credentials (which
// chain to the CA of that config only) and its log shows the boot on
// OpenStack.
func (o *osE2E) checkTalosNode(t *testing.T, m schema.Machine) {
	t.Helper()
	path := "/api/v1/tenants/" + osTenant + "/machines/" + m.Metadata.Name + "/logs?service=machined"
	code, b := o.srv.Request(http.MethodGet, path, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(b), "on platform openstack: machine powered on") {
		t.Errorf("machine %s at %s: logs %d %s; want its boot on OpenStack", m.Metadata.Name, m.Spec.ManagementAddress, code, b)
	}
}

// checkNoCredentialLeak looks for the password of the clouds file in every
// file of the data dir, the server's log, the API's answers and every argv
// tofu was started with, and checks that tofu got the clouds file through
// its environment.
func (o *osE2E) checkNoCredentialLeak(t *testing.T) {
	clouds, err := os.ReadFile(filepath.Join(o.cloud, "clouds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`password: "([^"]+)"`).FindSubmatch(clouds)
	if m == nil || len(m[1]) < 16 {
		t.Fatalf("no password in the simulated cloud's clouds.yaml")
	}
	secret := m[1]
	filepath.WalkDir(o.data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, secret) {
			t.Errorf("the clouds.yaml password is in %s", p)
		}
		return nil
	})
	if strings.Contains(o.srv.Log(), string(secret)) {
		t.Error("the clouds.yaml password is in the server's log")
	}
	for _, path := range []string{"/api/v1/status", "/api/v1/tenants", "/api/v1/machines", "/api/v1/commits", "/api/v1/providers"} {
		if _, b := o.srv.Request(http.MethodGet, path, nil, nil); bytes.Contains(b, secret) {
			t.Errorf("the clouds.yaml password is in GET %s", path)
		}
	}
	argv, err := os.ReadFile(o.argvLog)
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.Split(strings.TrimSpace(string(argv)), "\n")
	if len(runs) < 5 || bytes.Contains(argv, secret) || bytes.Contains(argv, []byte("clouds.yaml\x00")) {
		t.Errorf("%d tofu runs logged; the password or the clouds file is in an argv", len(runs))
	}
	want := " OS_CLIENT_CONFIG_FILE=" + filepath.Join(o.cloud, "clouds.yaml")
	for _, r := range runs {
		if !strings.HasSuffix(r, want) {
			t.Errorf("a tofu run without the clouds file in its environment: %q", strings.ReplaceAll(r, "\x00", " "))
			break
		}
	}
}
