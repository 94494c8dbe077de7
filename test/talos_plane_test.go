package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The Talos plane end to end: the real server binary, tofu, the sim
// provider and the simulated Talos nodes the server hosts. What the
// machines were asked to do is read from their own journals.

// Stage durations of the simulated nodes in these tests: an upgrade takes
// planeUpgrade+planeReboot, a machine that does not come back falls back
// to its old version after planeFallback.
const (
	planeUpgrade  = 300 * time.Millisecond
	planeReboot   = 400 * time.Millisecond
	planeFallback = 1500 * time.Millisecond
)

var planeTimings = fmt.Sprintf("boot=300ms,install=200ms,reboot=%s,upgrade=%s,fallback=%s", planeReboot, planeUpgrade, planeFallback)

// planeArgs are the serve flags of the plane's tests: short stages, a
// short probe TTL, and a short timeout for a machine to be back.
func planeArgs(extra ...string) []string {
	return append([]string{"--sim-timings", planeTimings, "--probe-ttl", "300ms", "--talos-timeout", "5s", "--talos-wait", "30s"}, extra...)
}

// planeCall is one write call a machine's journal records.
type planeCall struct {
	talosnode.JournalEntry
	Machine string // the machine's TF address
	ID      string
	CP      bool
}

// planeCalls returns the successful write calls named of the tenant's
// machines, by time.
func planeCalls(t *testing.T, e *e2e, tenant string, calls ...string) []planeCall {
	t.Helper()
	var out []planeCall
	for _, m := range e.srv.tenantMachines(tenant) {
		j, err := talosnode.ReadJournal(e.data+"-sim", m.Metadata.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range j {
			if slices.Contains(calls, c.Call) && c.Error == "" && !c.DryRun {
				out = append(out, planeCall{JournalEntry: c, Machine: m.Spec.TFAddress, ID: m.Metadata.Name, CP: m.Spec.Role == schema.RoleControlPlane})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// planeBootstraps counts the Bootstrap calls the tenant's machines got,
// and names the machines.
func planeBootstraps(t *testing.T, e *e2e, tenant string) []string {
	t.Helper()
	var on []string
	for _, c := range planeCalls(t, e, tenant, "Bootstrap") {
		on = append(on, c.Machine)
	}
	return on
}

// planeWaitReady waits until every machine of the tenant is ready and up
// to date, as the plane observed them, and the tenant's API answers.
func planeWaitReady(t *testing.T, e *e2e, tenant string) {
	t.Helper()
	e.srv.WaitFor(tenant+"'s machines to be ready", func() bool {
		ms := e.srv.tenantMachines(tenant)
		for _, m := range ms {
			if !m.Status.Ready || !m.Status.Connected || !m.Status.ConfigUpToDate {
				return false
			}
		}
		var tn schema.Tenant
		e.srv.mustGet("/api/v1/tenants/"+tenant, &tn)
		return len(ms) > 0 && tn.Status.APIReady && tn.Status.ControlPlaneReady
	})
}

// planeTenant returns a tenant as the API shows it.
func planeTenant(t *testing.T, e *e2e, tenant string) schema.Tenant {
	t.Helper()
	var tn schema.Tenant
	e.srv.mustGet("/api/v1/tenants/"+tenant, &tn)
	return tn
}

// planeTenantHistory returns every version of the tenant the store's
// event log holds, oldest first, up to the one the API serves now.
func planeTenantHistory(t *testing.T, e *e2e, tenant string) []schema.Tenant {
	t.Helper()
	now := planeTenant(t, e, tenant)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL()+"/api/v1/tenants/"+tenant+"/events?watch=true&resourceVersion=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", tenant, resp.StatusCode, b)
	}
	var out []schema.Tenant
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("watch %s ended before resourceVersion %s: %v", tenant, now.Metadata.ResourceVersion, err)
		}
		var kind struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(ev.Object, &kind); err != nil || kind.Kind != schema.KindTenant {
			continue
		}
		var tn schema.Tenant
		if err := json.Unmarshal(ev.Object, &tn); err != nil {
			t.Fatal(err)
		}
		out = append(out, tn)
		if tn.Metadata.ResourceVersion == now.Metadata.ResourceVersion {
			return out
		}
	}
}

// TestTalosPlaneBootstrapsEachTenantOnce: a tenant forms, is bootstrapped
// on its first control plane and becomes ready from what its machines
// say; a restart of the server and another commit bootstrap nothing more.
// Its phase is forming until every machine reports ready, then active,
// without a commit.
func TestTalosPlaneBootstrapsEachTenantOnce(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs()})
	for _, tenant := range []string{"production", "staging"} {
		planeWaitReady(t, e, tenant)
		e.srv.WaitFor(tenant+" to be active", func() bool { return planeTenant(t, e, tenant).Status.Phase == schema.TenantActive })
		applied := false
		for _, v := range planeTenantHistory(t, e, tenant) {
			m := v.Status.Machines
			if v.Status.Phase == schema.TenantActive && (m.Ready != m.Desired || m.Total != m.Desired) {
				t.Errorf("%s was active with %d of %d machines ready (resourceVersion %s)", tenant, m.Ready, m.Desired, v.Metadata.ResourceVersion)
			}
			if v.Status.ObservedCommit != "" && m.Total == m.Desired && m.Ready < m.Desired {
				applied = true
				if v.Status.Phase != schema.TenantForming {
					t.Errorf("%s: applied, %d of %d machines ready: phase %s, want forming", tenant, m.Ready, m.Desired, v.Status.Phase)
				}
			}
		}
		if !applied {
			t.Errorf("%s: no version of the tenant was applied with machines not ready yet", tenant)
		}
		if got := planeBootstraps(t, e, tenant); !slices.Equal(got, []string{"rezussim_machine.ng_controlplane[0]"}) {
			t.Fatalf("%s: bootstrapped on %v, want once on its first control plane", tenant, got)
		}
		for _, m := range e.srv.tenantMachines(tenant) {
			if m.Status.Stage != schema.StageReady || m.Status.TalosVersion != "v1.12.6" || m.Status.KubernetesVersion == "" {
				t.Errorf("%s: machine %s status %+v", tenant, m.Spec.TFAddress, m.Status)
			}
		}
	}
	e.srv.Stop()
	e.srv.Start()
	e.edit(e2eManifests+"/staging/tenant.yaml", "environment: staging", "environment: staging\n    team: platform")
	e.srv.waitApplied(e.push("Label staging"))
	planeWaitReady(t, e, "staging")
	for _, tenant := range []string{"production", "staging"} {
		if got := planeBootstraps(t, e, tenant); len(got) != 1 {
			t.Fatalf("%s: %d bootstraps after a restart and a commit, want 1: %v", tenant, len(got), got)
		}
	}
}

// TestTalosPlaneBootstrapAfterSIGKILL kills the server after tofu created
// the machines and before they were ready to be bootstrapped; the
// restarted server bootstraps each tenant exactly once.
func TestTalosPlaneBootstrapAfterSIGKILL(t *testing.T) {
	// Machines take 3 s to boot: the kill comes while the plane waits.
	e := newE2E(t, e2eOptions{noWait: true, args: planeArgs("--sim-timings", "boot=3s,install=200ms,reboot=400ms")})
	s := e.srv
	s.WaitFor("production's machines to exist", func() bool {
		return len(simMachines(t, e.data+"-sim", "production")) == 5
	})
	s.Kill()
	for _, id := range simMachines(t, e.data+"-sim", "production") {
		j, _ := talosnode.ReadJournal(e.data+"-sim", id)
		for _, c := range j {
			if c.Call == "Bootstrap" {
				t.Fatalf("machine %s was bootstrapped before the kill: the kill came too late to test anything", id)
			}
		}
	}
	s.Start()
	s.waitApplied(e.first)
	for _, tenant := range []string{"production", "staging"} {
		planeWaitReady(t, e, tenant)
		if got := planeBootstraps(t, e, tenant); !slices.Equal(got, []string{"rezussim_machine.ng_controlplane[0]"}) {
			t.Fatalf("%s: bootstrapped on %v after the SIGKILL, want once on its first control plane", tenant, got)
		}
	}
}

// TestTalosPlaneReconcilingUntilBootstrapped: while a run waits in the
// plane for machines that take seconds to boot, the tenant stays
// Reconciling (reason Applying, naming the plane), as its Commit stays
// Applying; Reconciling turns False, Applied, only after the bootstrap,
// when the run ends.
func TestTalosPlaneReconcilingUntilBootstrapped(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs("--sim-timings", "boot=3s,install=200ms,reboot=400ms")})
	for _, tenant := range []string{"production", "staging"} {
		boot := planeCalls(t, e, tenant, "Bootstrap")
		if len(boot) != 1 {
			t.Fatalf("%s: %d bootstraps, want 1", tenant, len(boot))
		}
		inPlane, applied := false, false
		for _, v := range planeTenantHistory(t, e, tenant) {
			rec := v.Status.Conditions.Get(schema.ConditionReconciling)
			if v.Status.ObservedCommit == "" || rec == nil {
				continue
			}
			if rec.Status == schema.ConditionTrue && rec.Reason == schema.ReasonApplying && strings.Contains(rec.Message, "Talos plane") {
				inPlane = true
			}
			if rec.Status != schema.ConditionFalse {
				continue
			}
			if !rec.LastTransitionTime.After(boot[0].Time) {
				t.Errorf("%s: Reconciling False (%s: %s) since %s, before the bootstrap at %s (resourceVersion %s)", tenant,
					rec.Reason, rec.Message, rec.LastTransitionTime.Format(time.RFC3339Nano), boot[0].Time.Format(time.RFC3339Nano), v.Metadata.ResourceVersion)
				break
			}
			applied = applied || rec.Reason == schema.ReasonApplied
		}
		if !inPlane || !applied {
			t.Errorf("%s: a version applying in the plane %v, applied after the bootstrap %v; want both", tenant, inPlane, applied)
		}
	}
}

// planeTalosClient returns a Talos client with the tenant's talosconfig as
// the API hands it out, pointed at address.
func planeTalosClient(t *testing.T, e *e2e, tenant, address string) *client.Client {
	t.Helper()
	code, b := e.srv.Request("GET", "/api/v1/tenants/"+tenant+"/talosconfig", nil, nil)
	if code != 200 {
		t.Fatalf("talosconfig of %s: %d %s", tenant, code, b)
	}
	cfg, err := clientconfig.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(context.Background(), client.WithConfig(cfg), client.WithEndpoints(address))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTalosPlanePatchInPlace: a changed patch reaches every machine in
// place through ApplyConfiguration, control planes first and one at a
// time; no machine is replaced and tofu destroys nothing. Each machine's
// running config has the patch; another tenant's talosconfig is refused
// by the same machines.
func TestTalosPlanePatchInPlace(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs()})
	planeWaitReady(t, e, "production")
	before := e2eMachineIDs(e.srv.tenantMachines("production"))
	path := e2eManifests + "/production/tenant.yaml"
	e.edit(path, "  configPatches:\n", "  configPatches:\n    - name: somaxconn\n      patch: |\n        machine:\n          sysctls:\n            net.core.somaxconn: \"65535\"\n")
	c := e.srv.waitApplied(e.push("Production: a sysctl on every machine"))
	r := e2eResult(t, c, "production")
	if r.Plan.Add != 0 || r.Plan.Destroy != 0 {
		t.Fatalf("tofu planned %+v for a patch: machines were replaced", r.Plan)
	}
	planeWaitReady(t, e, "production")
	e2eSameIDs(t, "after the patch", before, e2eMachineIDs(e.srv.tenantMachines("production")))

	applies := planeCalls(t, e, "production", "ApplyConfiguration")
	if len(applies) != 5 {
		t.Fatalf("%d config applies, want one on each of the 5 machines: %+v", len(applies), applies)
	}
	seen := map[string]bool{}
	for i, a := range applies {
		if seen[a.ID] {
			t.Fatalf("machine %s got the config twice", a.Machine)
		}
		seen[a.ID] = true
		if (i < 3) != a.CP {
			t.Fatalf("apply %d went to %s: control planes must come first", i, a.Machine)
		}
		if a.Mode != "auto" {
			t.Errorf("apply to %s with mode %q, want auto", a.Machine, a.Mode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range e.srv.tenantMachines("production") {
		c := planeTalosClient(t, e, "production", m.Spec.ManagementAddress)
		mc, err := safe.StateGet[*config.MachineConfig](ctx, c.COSI, config.NewMachineConfig(nil).Metadata())
		if err != nil {
			t.Fatalf("%s: running config: %v", m.Spec.TFAddress, err)
		}
		b, err := mc.Provider().Bytes()
		if err != nil || !strings.Contains(string(b), "net.core.somaxconn: \"65535\"") {
			t.Errorf("%s: the running config lacks the patch (%v)", m.Spec.TFAddress, err)
		}
		if !m.Status.ConfigUpToDate {
			t.Errorf("%s: configUpToDate false after the rollout", m.Spec.TFAddress)
		}
		// Staging's talosconfig is refused by production's machines.
		other := planeTalosClient(t, e, "staging", m.Spec.ManagementAddress)
		if _, err := other.Version(ctx); err == nil {
			t.Fatalf("%s answered a client with staging's talosconfig", m.Spec.TFAddress)
		}
	}
}

// planeBump sets production's talosVersion.
func planeBump(e *e2e, to string) string {
	e.edit(e2eManifests+"/production/tenant.yaml", `talosVersion: "1.12.6"`, `talosVersion: "`+to+`"`)
	return e.push("Production: Talos " + to)
}

// planeCheckOneAtATime fails unless the calls go to control planes first
// and each starts after the machine before it had time to be back.
func planeCheckOneAtATime(t *testing.T, calls []planeCall, gap time.Duration) {
	t.Helper()
	workers := false
	for i, c := range calls {
		if !c.CP {
			workers = true
		} else if workers {
			t.Fatalf("control plane %s changed after a worker", c.Machine)
		}
		if i > 0 {
			if d := c.Time.Sub(calls[i-1].Time); d < gap {
				t.Fatalf("%s started %v after %s: two machines at once (a machine takes %v)", c.Machine, d, calls[i-1].Machine, gap)
			}
		}
	}
}

// TestTalosPlaneUpgradeRollsBackAMachineThatDoesNotReturn: an upgrade
// rolls machine by machine, control planes first; a worker that comes back
// on its old version is rolled back, the rollout stops there, and the
// tenant's status and the commit name the machine.
func TestTalosPlaneUpgradeRollsBackAMachineThatDoesNotReturn(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs()})
	planeWaitReady(t, e, "production")
	var bad schema.Machine
	for _, m := range e.srv.tenantMachines("production") {
		if m.Spec.TFAddress == "rezussim_machine.ng_workers[0]" {
			bad = m
		}
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{bad.Metadata.Name: {NoUpgradeReturn: true}}); err != nil {
		t.Fatal(err)
	}
	sha := planeBump(e, "1.12.7")
	c := e.srv.WaitCommit(sha)
	r := e2eResult(t, c, "production")
	if r.Phase != schema.CommitFailed || !r.Stalled || !strings.Contains(r.Error, bad.Spec.TFAddress) || !strings.Contains(r.Error, "rolled back") {
		t.Fatalf("production's result: %s %v %q, want a stalled failure naming %s, rolled back", r.Phase, r.Stalled, r.Error, bad.Spec.TFAddress)
	}
	// The observer writes the Upgrading condition from the rollout record.
	var tn schema.Tenant
	e.srv.WaitFor("the Upgrading condition to name "+bad.Spec.TFAddress, func() bool {
		tn = planeTenant(t, e, "production")
		up := tn.Status.Conditions.Get(schema.ConditionUpgrading)
		return up != nil && up.Status == schema.ConditionFalse && up.Reason == schema.ReasonRolloutFailed && strings.Contains(up.Message, bad.Spec.TFAddress)
	})
	if st := tn.Status.Conditions.Get(schema.ConditionStalled); st == nil || st.Status != schema.ConditionTrue {
		t.Fatalf("Stalled condition %+v, want True", st)
	}

	ups := planeCalls(t, e, "production", "Upgrade", "Rollback")
	var order []string
	for _, u := range ups {
		order = append(order, u.Call+" "+u.Machine)
	}
	want := []string{
		"Upgrade rezussim_machine.ng_controlplane[0]", "Upgrade rezussim_machine.ng_controlplane[1]", "Upgrade rezussim_machine.ng_controlplane[2]",
		"Upgrade " + bad.Spec.TFAddress, "Rollback " + bad.Spec.TFAddress,
	}
	if !slices.Equal(order, want) {
		t.Fatalf("calls %q, want %q", order, want)
	}
	if img := ups[0].Image; img != "ghcr.io/siderolabs/installer:v1.12.7" {
		t.Errorf("upgrade image %q", img)
	}
	planeCheckOneAtATime(t, ups[:4], planeUpgrade+planeReboot)
	for _, m := range e.srv.tenantMachines("production") {
		want := "v1.12.7"
		if m.Spec.NodeGroup == "workers" {
			want = "v1.12.6" // rolled back, and the one after it never started
		}
		e.srv.WaitFor(m.Spec.TFAddress+" to show Talos "+want, func() bool {
			for _, x := range e.srv.tenantMachines("production") {
				if x.Metadata.Name == m.Metadata.Name {
					return x.Status.TalosVersion == want && x.Status.Connected
				}
			}
			return false
		})
	}
}

// TestTalosPlaneRolloutResumesAfterSIGKILL kills the server while an
// upgrade rolls; the restarted server resumes where it stopped: every
// machine is upgraded exactly once, never two at a time.
func TestTalosPlaneRolloutResumesAfterSIGKILL(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs()})
	planeWaitReady(t, e, "production")
	sha := planeBump(e, "1.12.7")
	e.srv.WaitFor("the second machine's upgrade", func() bool {
		return len(planeCalls(t, e, "production", "Upgrade")) >= 2
	})
	e.srv.Kill()
	killed := 0
	for _, id := range simMachines(t, e.data+"-sim", "production") {
		j, _ := talosnode.ReadJournal(e.data+"-sim", id)
		for _, c := range j {
			if c.Call == "Upgrade" && c.Error == "" {
				killed++
			}
		}
	}
	e.srv.Start()
	e.srv.waitApplied(sha)
	planeWaitReady(t, e, "production")
	ups := planeCalls(t, e, "production", "Upgrade")
	if len(ups) != 5 {
		t.Fatalf("%d upgrades (%d before the kill), want exactly one per machine: %+v", len(ups), killed, ups)
	}
	seen := map[string]bool{}
	for _, u := range ups {
		if seen[u.ID] {
			t.Fatalf("%s upgraded twice", u.Machine)
		}
		seen[u.ID] = true
	}
	planeCheckOneAtATime(t, ups, planeUpgrade+planeReboot)
	for _, m := range e.srv.tenantMachines("production") {
		if m.Status.TalosVersion != "v1.12.7" {
			t.Errorf("%s runs %s", m.Spec.TFAddress, m.Status.TalosVersion)
		}
	}
}

// TestTalosPlaneAllowReplace: a change that forces new control-plane
// machines (an image the node group names) stalls without the
// Rezuscloud-Allow-Replace trailer, with nothing applied, and is applied
// with it; the new control planes form a new cluster.
func TestTalosPlaneAllowReplace(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs()})
	planeWaitReady(t, e, "staging")
	before := e2eMachineIDs(e.srv.tenantMachines("staging"))
	e.edit(e2eManifests+"/staging/nodegroups.yaml", "  providerConfig:\n    shape: small\n---", "  providerConfig:\n    shape: small\n    image: talos-custom-1.12.6\n---")
	sha := e.push("Staging: a custom image for the control plane")
	c := e.srv.WaitCommit(sha)
	r := e2eResult(t, c, "staging")
	if r.Phase != schema.CommitFailed || !r.Stalled || r.Reason != schema.ReasonReplaceBlocked || !strings.Contains(r.Error, "Rezuscloud-Allow-Replace: staging") {
		t.Fatalf("without the trailer: %s stalled=%v reason=%s %q", r.Phase, r.Stalled, r.Reason, r.Error)
	}
	e2eSameIDs(t, "after the blocked commit", before, e2eMachineIDs(e.srv.tenantMachines("staging")))
	if n := len(simMachines(t, e.data+"-sim", "staging")); n != 2 {
		t.Fatalf("%d staging machines in the sim cloud after the blocked commit, want 2", n)
	}

	e.work.Write("NOTES.md", "replace staging's control plane\n")
	sha = e.push("Staging: replace the control plane\n\nRezuscloud-Allow-Replace: staging")
	c = e.srv.waitApplied(sha)
	if r := e2eResult(t, c, "staging"); r.Plan.Add != 1 || r.Plan.Destroy != 1 {
		t.Fatalf("with the trailer: plan %+v, want the control plane replaced", r.Plan)
	}
	after := e2eMachineIDs(e.srv.tenantMachines("staging"))
	replaced := 0
	for _, m := range e.srv.tenantMachines("staging") {
		if m.Spec.Role == schema.RoleControlPlane && before[m.Metadata.Name] == "" {
			replaced++
		}
	}
	if replaced != 1 || len(after) != 2 {
		t.Fatalf("with the trailer: %d new control planes of %d machines, want 1 of 2", replaced, len(after))
	}
	planeWaitReady(t, e, "staging")
}

// TestTalosPlaneRestartAnnotation: rezuscloud.io/restartedAt on a node
// group reboots its machines one at a time, once per value; the other
// node groups' machines are left alone, and the same value again reboots
// nothing.
func TestTalosPlaneRestartAnnotation(t *testing.T) {
	e := newE2E(t, e2eOptions{args: planeArgs()})
	planeWaitReady(t, e, "production")
	path := e2eManifests + "/production/nodegroups.yaml"
	e.edit(path, "  name: workers\n", "  name: workers\n  annotations:\n    rezuscloud.io/restartedAt: \"2026-12-01T10:00:00Z\"\n")
	e.srv.waitApplied(e.push("Restart production's workers"))
	reboots := planeCalls(t, e, "production", "Reboot")
	if len(reboots) != 2 || reboots[0].CP || reboots[1].CP || reboots[0].ID == reboots[1].ID {
		t.Fatalf("reboots %+v, want one on each of the 2 workers", reboots)
	}
	planeCheckOneAtATime(t, reboots, planeReboot)
	// Another commit that keeps the value restarts nothing.
	e.work.Write("NOTES.md", "unrelated\n")
	e.edit(e2eManifests+"/production/tenant.yaml", "environment: production", "environment: production\n    team: platform")
	e.srv.waitApplied(e.push("Label production"))
	if n := len(planeCalls(t, e, "production", "Reboot")); n != 2 {
		t.Fatalf("%d reboots after a commit that kept the restart value, want 2", n)
	}
}
