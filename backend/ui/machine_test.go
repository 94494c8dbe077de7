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

// inventory is a medium simulated machine's inventory.
func inventory(m *schema.Machine) {
	m.Status.Hardware = &schema.MachineHardware{Arch: "amd64", CPUs: 4, MemoryMiB: 8192,
		System:        &schema.SystemInformation{Manufacturer: "RezusCloud", ProductName: "sim medium", SerialNumber: "SIM-0001"},
		Processors:    []schema.Processor{{Manufacturer: "RezusCloud", ProductName: "sim vCPU", CoreCount: 4, ThreadCount: 4, MaxSpeedMHz: 2400}},
		MemoryModules: []schema.MemoryModule{{SizeMiB: 4096}, {SizeMiB: 4096}},
		BlockDevices: []schema.BlockDevice{{Name: "vda", Path: "/dev/vda", SizeBytes: 80e9, Model: "sim disk", Transport: "virtio", SystemDisk: true},
			{Name: "vdb", Path: "/dev/vdb", SizeBytes: 10 << 30, Transport: "virtio", Rotational: true}}}
	m.Status.Network = &schema.MachineNetwork{Hostname: m.Spec.Hostname, Domainname: "example.internal", Addresses: []string{"127.0.4.1/8"},
		DefaultGateways: []string{"127.0.0.1"}, Links: []schema.NetworkLink{{Name: "eth0", HardwareAddress: "02:00:7f:00:04:01", SpeedMbps: 10000, Up: true, OperationalState: "up"}}}
	m.Status.Schematic = &schema.MachineSchematic{ID: strings.Repeat("5c", 32),
		Extensions: []schema.Extension{{Name: "iscsi-tools", Version: "v0.2.0"}, {Name: "qemu-guest-agent", Version: "10.0.2"}}}
}

// TestMachinePageInventory: the machine page shows what the machine told
// of its hardware (the system disk marked), its network and its image
// schematic, says when it runs maintenance mode, and says that nothing
// is known of a machine that has not answered.
func TestMachinePageInventory(t *testing.T) {
	r := newRig(t, rigOptions{})
	objs := fleet("shop", 1, 1)
	cp := objs[2].(*schema.Machine)
	cp.Status.Connected = true
	inventory(cp)
	w := objs[4].(*schema.Machine)
	w.Status = schema.MachineStatus{Stage: schema.StageMaintenance, Connected: true, Maintenance: true}
	r.put(objs...)

	page := body(t, r.do("GET", "/tenants/shop/machines/"+cp.Metadata.Name, nil, ""), 200)
	contains(t, "inventory", page, `<section data-part="inventory" data-kinds="Machine">`,
		`<dt>CPUs</dt><dd>4 · amd64<div class="note">sim vCPU (RezusCloud): 4 cores, 4 threads, 2400 MHz</div></dd>`,
		`<dt>Memory</dt><dd>8.0 GiB<div class="note">2 modules: 4.0 GiB, 4.0 GiB</div></dd>`,
		`<tr data-disk="vda"><td><code>vda</code> <span class="badge cond-good">system disk</span></td><td>74 GiB</td>`,
		`<tr data-disk="vdb"><td><code>vdb</code></td><td>10 GiB</td><td class="wrap">—</td><td>virtio · rotational</td>`,
		`<dt>Hostname</dt><dd class="wrap">shop-controlplane-0.example.internal</dd>`, `<dd class="wrap">127.0.4.1/8</dd>`,
		`<dt>Gateways</dt><dd class="wrap">127.0.0.1</dd>`,
		`<span class="badge cond-good">eth0</span> up · <code>02:00:7f:00:04:01</code> · 10000 Mb/s`,
		`<code class="wrap" title="`+strings.Repeat("5c", 32)+`">`, `<li>iscsi-tools <small>v0.2.0</small></li><li>qemu-guest-agent <small>10.0.2</small></li>`)
	if strings.Contains(page, "maintenance mode") {
		t.Error("a configured machine is said to run maintenance mode")
	}
	if strings.Contains(page, " style=") {
		t.Error("the page carries an inline style, which its Content-Security-Policy refuses")
	}
	page = body(t, r.do("GET", "/tenants/shop/machines/"+w.Metadata.Name, nil, ""), 200)
	contains(t, "maintenance", page, `<span class="badge cond-held" data-maintenance>maintenance mode</span>`,
		"The machine told no hardware.")
	objs[4].(*schema.Machine).Status = schema.MachineStatus{}
	r.put(objs[4])
	page = body(t, r.do("GET", "/tenants/shop/machines/"+w.Metadata.Name+"?part=inventory", nil, ""), 200)
	contains(t, "a machine never heard from", page, "Not known: the machine has not answered yet.")
}
