package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestMachinePageStatus: the machine page says once that the machine is
// ready, that its Talos API answers now (not when its status last
// changed), whether its config is its node group's, its services and,
// for a control plane, its etcd membership; for a machine that does not
// answer, when it last did and why not.
func TestMachinePageStatus(t *testing.T) {
	r := filled(t, rigOptions{})
	objs := fleet("shop", 2, 1)
	cp := objs[2].(*schema.Machine)
	if cp.Metadata.Name != "shop-controlplane-0" {
		t.Fatalf("fixture order: %s", cp.Metadata.Name)
	}
	cp.Status.Connected, cp.Status.ConfigUpToDate, cp.Status.LastSeen = true, true, testNow.Add(-10*time.Minute)
	cp.Status.Services = []schema.MachineService{
		{Name: "apid", State: "Running", Health: schema.ServiceHealthy},
		{Name: "etcd", State: "Running", Health: schema.ServiceHealthy},
		{Name: "kubelet", State: "Running", Health: schema.ServiceUnhealthy, Message: "dial tcp 127.0.0.1:10248: connection refused"},
		{Name: "trustd", State: "Waiting"},
	}
	cp.Status.Etcd = &schema.EtcdMembership{Member: true, Members: []string{"shop-controlplane-0", "shop-controlplane-1"}}
	cp.Status.Kubernetes = &schema.MachineKubernetes{NodeName: "shop-controlplane-0", KubeletVersion: "v1.34.1",
		Conditions: []schema.NodeCondition{{Type: "Ready", Status: "False", Reason: "KubeletNotReady", Message: "the node is rebooting"}}}
	gone := objs[3].(*schema.Machine)
	gone.Status = schema.MachineStatus{Stage: schema.StageInitializing, LastSeen: testNow.Add(-3 * time.Minute), LastError: "Version: connection refused"}
	r.put(objs...)

	page := body(t, r.do("GET", "/tenants/shop/machines/shop-controlplane-0", nil, ""), 200)
	if n := strings.Count(page, ">ready</span>"); n != 1 {
		t.Errorf("the page says ready %d times, want once", n)
	}
	contains(t, "control plane", page, `<span class="badge cond-good">live</span> answers the server's probes`,
		`as it is now since <time`, `<span class="badge cond-good">up to date</span>`,
		`<span class="badge cond-good">apid</span> Running</li>`,
		`<span class="badge cond-bad">kubelet</span> Running, unhealthy<div class="error wrap">dial tcp 127.0.0.1:10248: connection refused</div>`,
		`<span class="badge cond-busy">trustd</span> Waiting`,
		`<span class="badge cond-good">member</span>`, `<li><strong>shop-controlplane-0</strong></li><li>shop-controlplane-1</li>`,
		`<dt>Node</dt><dd><code class="wrap">shop-controlplane-0</code></dd>`,
		`<span class="badge cond-bad">NotReady</span> <span class="badge cond-held">SchedulingDisabled</span>`, `<dd>v1.34.1</dd>`,
		`<p class="error wrap">KubeletNotReady: the node is rebooting</p>`)
	if strings.Contains(page, "Last seen") {
		t.Error("a machine that answers is shown as last seen some time ago")
	}
	page = body(t, r.do("GET", "/tenants/shop/machines/shop-controlplane-1", nil, ""), 200)
	contains(t, "control plane that does not answer", page, `<span class="badge cond-bad">no answer</span> last answered <time`, ">3m ago</time>",
		"Version: connection refused", "not known while the machine does not answer")
	worker := body(t, r.do("GET", "/tenants/shop/machines/shop-workers-0", nil, ""), 200)
	contains(t, "a worker whose Node was not seen", worker, "The tenant's Kubernetes API has shown no Node of this machine.")
	if strings.Contains(worker, "data-etcd") {
		t.Error("a worker's page has an etcd card")
	}
}
