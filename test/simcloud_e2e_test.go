package test

import (
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// metalOne is a node group of metal-lab: one control plane at address.
const metalOne = `apiVersion: rezuscloud.io/v1
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
`

// TestSimCloudOffStallsSimTenants runs the server without --sim-cloud on
// a repository of the example tenants on the simulated cloud and one on
// bare metal, whose machine the test runs: the sim tenants stall (reason
// ProviderClassDisabled, a message that names --sim-cloud) and nothing of
// them is applied (no state, no machine, no sim dir), while the metal
// tenant is applied.
func TestSimCloudOffStallsSimTenants(t *testing.T) {
	host, err := talosnode.Open(talosnode.Options{Dir: t.TempDir(), Timings: talosnode.Timings{
		Boot: 100 * time.Millisecond, Install: 100 * time.Millisecond, Reboot: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	addr := netip.AddrFrom4([4]byte{127, byte(host.Block()), 9, 1}).String()
	if err := host.StartMaintenance(addr); err != nil {
		t.Fatal(err)
	}
	e, _ := newMetalRepo(t, strings.ReplaceAll(metalOne, "%s", addr))
	e.copyExamples()
	first := e.push("Example tenants on the simulated cloud and metal-lab on bare metal")
	e.srv = newE2EServer(t, metalServer(e, "--talos-wait", "30s", "--allow-loopback-metal"))
	e.srv.Start()

	c := e.srv.WaitCommit(first)
	if c.Status.Phase != schema.CommitPartiallyFailed {
		t.Errorf("commit %s, want PartiallyFailed: %s", c.Status.Phase, e2eBrief(c.Status))
	}
	if r := e2eResult(t, c, metalTenant); r.Phase != schema.CommitSucceeded || r.Plan.Text() != "machines +1, other +1" {
		t.Errorf("metal-lab: %s, plan %s; want applied with its machine", r.Phase, r.Plan.Text())
	}
	const why = "this server hosts no simulated cloud; start it with --sim-cloud (REZUSCLOUD_SIM_CLOUD=true) to run one"
	for _, tenant := range []string{"production", "staging"} {
		r := e2eResult(t, c, tenant)
		if r.Phase != schema.CommitFailed || !r.Stalled || r.Reason != schema.ReasonProviderClassDisabled ||
			!strings.HasPrefix(r.Error, "providerClass sim of node groups controlplane, workers: "+why) {
			t.Errorf("%s: %s, stalled %v, reason %s, error %q; want stalled by its provider class, naming --sim-cloud", tenant, r.Phase, r.Stalled, r.Reason, r.Error)
		}
		var tn schema.Tenant
		e.srv.mustGet("/api/v1/tenants/"+tenant, &tn)
		if st := tn.Status.Conditions.Get(schema.ConditionStalled); st == nil || st.Status != schema.ConditionTrue ||
			st.Reason != schema.ReasonProviderClassDisabled || !strings.Contains(st.Message, "--sim-cloud") {
			t.Errorf("%s's Stalled condition: %+v", tenant, st)
		}
		if ms := e.srv.tenantMachines(tenant); len(ms) != 0 {
			t.Errorf("%s has %d machines, want none", tenant, len(ms))
		}
		if code, b := e.srv.Request(http.MethodGet, "/api/v1/tfstate/"+tenant+"/versions", nil, nil); code != http.StatusNotFound {
			t.Errorf("%s's state versions: %d %s, want 404: no state was written", tenant, code, b)
		}
	}
	if _, err := os.Stat(e.data + "-sim"); !os.IsNotExist(err) {
		t.Errorf("the sim dir %s-sim: %v, want none", e.data, err)
	}
}
