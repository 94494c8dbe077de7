package talosnode

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	cosistate "github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// inventoryOf reads a node's inventory resources the way the Talos
// plane does, through machinery's COSI client.
type readInventory struct {
	threads   uint32
	memoryMiB uint32
	product   string
	disks     map[string]uint64
	system    string
	hostname  string
	current   []string
	gateways  []string
	macs      map[string]string
	schematic string
	exts      []string
}

func inventoryOf(t *testing.T, ctx context.Context, c *client.Client) readInventory {
	t.Helper()
	var got readInventory
	procs, err := safe.StateListAll[*hardware.Processor](ctx, c.COSI)
	if err != nil {
		t.Fatalf("processors: %v", err)
	}
	for r := range procs.All() {
		got.threads += r.TypedSpec().ThreadCount
	}
	mems, err := safe.StateListAll[*hardware.MemoryModule](ctx, c.COSI)
	if err != nil {
		t.Fatalf("memory modules: %v", err)
	}
	for r := range mems.All() {
		if s := r.TypedSpec().Size; s > 8<<10 {
			t.Errorf("memory module %s of %d MiB", r.Metadata().ID(), s)
		}
		got.memoryMiB += r.TypedSpec().Size
	}
	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		t.Fatalf("system information: %v", err)
	}
	got.product = si.TypedSpec().ProductName
	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		t.Fatalf("disks: %v", err)
	}
	got.disks = map[string]uint64{}
	for r := range disks.All() {
		got.disks[r.Metadata().ID()] = r.TypedSpec().Size
	}
	if sd, err := safe.StateGetByID[*block.SystemDisk](ctx, c.COSI, block.SystemDiskID); err == nil {
		got.system = sd.TypedSpec().DiskID
	} else if !cosistate.IsNotFoundError(err) {
		t.Fatalf("system disk: %v", err)
	}
	hn, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID)
	if err != nil {
		t.Fatalf("hostname: %v", err)
	}
	got.hostname = hn.TypedSpec().Hostname
	cur, err := safe.StateGetByID[*network.NodeAddress](ctx, c.COSI, network.NodeAddressCurrentID)
	if err != nil {
		t.Fatalf("current addresses: %v", err)
	}
	for _, p := range cur.TypedSpec().Addresses {
		got.current = append(got.current, p.String())
	}
	routes, err := safe.StateListAll[*network.RouteStatus](ctx, c.COSI)
	if err != nil {
		t.Fatalf("routes: %v", err)
	}
	for r := range routes.All() {
		if s := r.TypedSpec(); !s.Destination.IsValid() || s.Destination.Bits() == 0 {
			got.gateways = append(got.gateways, s.Gateway.String())
		}
	}
	links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		t.Fatalf("links: %v", err)
	}
	got.macs = map[string]string{}
	for r := range links.All() {
		if s := r.TypedSpec(); s.Physical() && s.LinkState && s.SpeedMegabits > 0 {
			got.macs[r.Metadata().ID()] = s.HardwareAddr.String()
		}
	}
	exts, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		t.Fatalf("extensions: %v", err)
	}
	for r := range exts.All() {
		m := r.TypedSpec().Metadata
		if m.Name == "schematic" {
			got.schematic = m.Version
		} else {
			got.exts = append(got.exts, m.Name+"@"+m.Version)
		}
	}
	return got
}

// TestInventoryFollowsTheShape: a node serves processors, memory,
// system information, disks and the system disk, host name, addresses, a
// default route on loopback, a link with a MAC and the image's
// extensions, sized by what the machine is: a sim record's shape, the
// hardware another cloud gives (a flavor), or a metal machine's, which
// serves them in maintenance mode too, without a system disk until it
// installs. The values are the same after the host restarts.
func TestInventoryFollowsTheShape(t *testing.T) {
	dir := t.TempDir()
	h := openHost(t, dir)
	secrets := bundle(t, "a")
	st, err := sim.Open(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Create(sim.Spec{Name: "acme-w-0", Tenant: "acme", NodeGroup: "w", Role: "controlplane", Shape: "large",
		Image: "talos-1.12.6", UserData: machineConfig(t, secrets, "controlplane", false)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	vm := addr(h, 20)
	flavor := VMHardware(4, 6<<10, 50)
	if err := h.BootMachine(Machine{ID: "vm-flavor", Address: vm, UserData: machineConfig(t, secrets, "controlplane", false), Hardware: &flavor}); err != nil {
		t.Fatal(err)
	}
	metal := addr(h, 21)
	if err := h.StartMaintenance(metal); err != nil {
		t.Fatal(err)
	}
	recInfo := waitRunning(t, h, rec.ID)
	vmInfo := waitRunning(t, h, vm)
	ctx := ctxT(t)

	check := func(h *Host) readInventory {
		got := inventoryOf(t, ctx, adminClient(t, secrets, rec.Address))
		if got.threads != 8 || got.memoryMiB != 16<<10 || got.system != "vda" || got.disks["vda"] != 160<<30 || len(got.disks) != 1 {
			t.Errorf("a large sim machine: %+v", got)
		}
		if got.hostname != recInfo.Hostname || !slices.Equal(got.current, []string{rec.Address + "/8"}) || !slices.Equal(got.gateways, []string{"127.0.0.1"}) {
			t.Errorf("a sim machine's network: %+v", got)
		}
		if mac := got.macs["eth0"]; len(got.macs) != 1 || len(mac) != 17 || mac[:2] != "02" {
			t.Errorf("a sim machine's links: %v", got.macs)
		}
		if len(got.schematic) != 64 || !slices.Equal(got.exts, []string{"qemu-guest-agent@10.0.2"}) {
			t.Errorf("a sim machine's extensions: %q %v", got.schematic, got.exts)
		}
		v := inventoryOf(t, ctx, adminClient(t, secrets, vm))
		if v.threads != 4 || v.memoryMiB != 6<<10 || v.disks["vda"] != 50<<30 || v.system != "vda" || v.hostname != vmInfo.Hostname {
			t.Errorf("a machine of a flavor: %+v", v)
		}
		if v.schematic != got.schematic || v.macs["eth0"] == got.macs["eth0"] {
			t.Errorf("the same image has the same schematic (%s, %s), machines their own MACs (%s, %s)", v.schematic, got.schematic, v.macs["eth0"], got.macs["eth0"])
		}
		m := inventoryOf(t, ctx, insecureClient(t, metal))
		if m.threads != 8 || m.memoryMiB != 32<<10 || len(m.disks) != 2 || m.disks["nvme0n1"] == 0 || m.disks["sda"] == 0 || m.system != "" ||
			!slices.Equal(m.exts, []string{"iscsi-tools@v0.2.0", "util-linux-tools@2.41.1"}) || m.schematic == got.schematic {
			t.Errorf("a metal machine in maintenance mode: %+v", m)
		}
		return got
	}
	before := check(h)
	h.Close()
	h = openHost(t, dir)
	waitRunning(t, h, rec.ID)
	waitRunning(t, h, vm)
	if after := check(h); after.macs["eth0"] != before.macs["eth0"] || after.schematic != before.schematic {
		t.Errorf("after a restart: %+v, before %+v", after, before)
	}
}

// watchKind opens a kind watch with its bootstrap contents and returns
// what it had, by ID, and the channel of later events.
func watchKind(t *testing.T, ctx context.Context, c *client.Client, ns resource.Namespace, typ resource.Type) (map[string]resource.Resource, chan cosistate.Event) {
	t.Helper()
	ch := make(chan cosistate.Event, 16)
	if err := c.COSI.WatchKind(ctx, resource.NewMetadata(ns, typ, "", resource.VersionUndefined), ch, cosistate.WithBootstrapContents(true)); err != nil {
		t.Fatal(err)
	}
	had := map[string]resource.Resource{}
	for ev := range ch {
		if ev.Type == cosistate.Bootstrapped {
			return had, ch
		}
		if ev.Type == cosistate.Errored {
			t.Fatalf("watch %s: %v", typ, ev.Error)
		}
		had[ev.Resource.Metadata().ID()] = ev.Resource
	}
	t.Fatalf("watch %s ended", typ)
	return nil, nil
}

// next is the next event of a watch, failing after 5 s.
func next(t *testing.T, what string, ch chan cosistate.Event) cosistate.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no event of %s", what)
	}
	return cosistate.Event{}
}

// quiet fails when a watch has an event within 200 ms.
func quiet(t *testing.T, what string, ch chan cosistate.Event) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("%s: unexpected %s of %s", what, ev.Type, ev.Resource.Metadata().ID())
	case <-time.After(200 * time.Millisecond):
	}
}

// TestInventoryChangesFireWatches: a swapped disk (Host.SetInventory)
// and a new address (a fault's addresses in the faults file) reach the
// watches of their kinds at once, as Destroyed, Created and Updated
// events with moved versions, while the watches of kinds that did not
// change stay quiet; clearing the fault brings the address back.
func TestInventoryChangesFireWatches(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 10)
	if err := h.Boot("vm-inv", a, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c := adminClient(t, secrets, a)
	disks, diskEvents := watchKind(t, ctx, c, block.NamespaceName, block.DiskType)
	addrs, addrEvents := watchKind(t, ctx, c, network.NamespaceName, network.NodeAddressType)
	if len(disks) != 1 || disks["vda"] == nil || len(addrs) != 4 {
		t.Fatalf("the watches began with disks %v, addresses %v", disks, addrs)
	}

	// A disk swapped for a bigger one, and a second disk.
	if err := h.SetInventory(a, func(inv *Inventory) {
		inv.Disks = []Disk{{Name: "vda", SizeBytes: 100 << 30, Transport: "virtio"}, {Name: "vdb", SizeBytes: 10 << 30, Transport: "virtio"}}
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]cosistate.EventType{}
	for len(got) < 2 {
		ev := next(t, "disks", diskEvents)
		got[ev.Resource.Metadata().ID()] = ev.Type
		if ev.Type == cosistate.Updated {
			if ev.Resource.(*block.Disk).TypedSpec().Size != 100<<30 || ev.Resource.Metadata().Version().Equal(disks["vda"].Metadata().Version()) {
				t.Errorf("the swapped disk: %v", ev.Resource)
			}
		}
	}
	if got["vda"] != cosistate.Updated || got["vdb"] != cosistate.Created {
		t.Errorf("disk events: %v", got)
	}
	quiet(t, "the addresses after a disk swap", addrEvents)

	// A new address from the faults file, as a server in another process
	// sees it.
	if err := WriteFaults(h.Dir(), Faults{a: {Addresses: []string{a + "/8", "127.99.0.1/8"}}}); err != nil {
		t.Fatal(err)
	}
	// All but "default", which keeps the first address.
	for seen := map[string]bool{}; len(seen) < 3; {
		ev := next(t, "addresses", addrEvents)
		if ev.Type != cosistate.Updated {
			t.Fatalf("address event %s", ev.Type)
		}
		seen[ev.Resource.Metadata().ID()] = true
		if ev.Resource.Metadata().ID() == network.NodeAddressCurrentID && len(ev.Resource.(*network.NodeAddress).TypedSpec().Addresses) != 2 {
			t.Errorf("the current addresses: %v", ev.Resource.(*network.NodeAddress).TypedSpec().Addresses)
		}
	}
	quiet(t, "the disks after an address change", diskEvents)
	quiet(t, "the default address after another address came", addrEvents)
	if err := WriteFaults(h.Dir(), Faults{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if ev := next(t, "addresses back", addrEvents); ev.Type != cosistate.Updated {
			t.Fatalf("address event %s", ev.Type)
		}
	}
	inv, _ := h.Inventory(a)
	if len(inv.Disks) != 2 || len(inv.Addresses) != 1 || inv.Addresses[0].String() != a+"/8" {
		t.Errorf("the inventory after the fault: %+v", inv)
	}

	// Bad input is refused and changes nothing.
	if err := h.SetInventory(a, func(inv *Inventory) { inv.Disks = []Disk{{Name: "a/b"}} }); err == nil {
		t.Error("a disk named a/b was taken")
	}
	if err := h.SetFault(a, Fault{Addresses: []string{"nowhere"}}); err == nil {
		t.Error("an address fault of nowhere was taken")
	}
	quiet(t, "the disks after bad input", diskEvents)
}
