package talosnode

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"strconv"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// defaultGateway is the gateway of every node's default route: on
// loopback, like everything a simulated machine reaches.
var defaultGateway = netip.MustParseAddr("127.0.0.1")

// resourceVersion is the version of one inventory resource and the hash
// of the spec it was given for.
type resourceVersion struct {
	sum uint64
	v   uint64
}

// stamp gives r its version on n: 1 when n serves it first, one more
// whenever its spec changes, so that watches see a change only where
// there is one. Called with h.mu held.
func (n *node) stamp(r resource.Resource) {
	b, _ := json.Marshal(r.Spec())
	f := fnv.New64a()
	f.Write(b)
	sum := f.Sum64()
	key := string(r.Metadata().Type()) + "/" + r.Metadata().ID()
	if n.versions == nil {
		n.versions = map[string]resourceVersion{}
	}
	rv := n.versions[key]
	if rv.v == 0 || rv.sum != sum {
		rv = resourceVersion{sum: sum, v: rv.v + 1}
		n.versions[key] = rv
	}
	r.Metadata().SetVersion(version(rv.v))
}

// listInventory serves the resources build makes of a node's inventory,
// each with its version.
func listInventory(build func(n *node, inv Inventory) []resource.Resource) func(*Host, *call) ([]resource.Resource, error) {
	return func(h *Host, c *call) ([]resource.Resource, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		rs := build(c.n, c.n.inventory())
		for _, r := range rs {
			c.n.stamp(r)
		}
		return rs, nil
	}
}

func processors(n *node, inv Inventory) []resource.Resource {
	r := hardware.NewProcessorInfo("CPU 0")
	*r.TypedSpec() = hardware.ProcessorSpec{
		Socket: "CPU 0", Manufacturer: "Advanced Micro Devices, Inc.", ProductName: "AMD EPYC 9354P 32-Core Processor",
		MaxSpeed: 3800, BootSpeed: 3250, Status: 65, CoreCount: uint32(max(1, inv.CPUs/2)), CoreEnabled: uint32(max(1, inv.CPUs/2)),
		ThreadCount: uint32(inv.CPUs), SerialNumber: serial(n, "cpu0"),
	}
	return []resource.Resource{r}
}

// memoryModules are modules of 8 GiB, the last one holding the rest.
func memoryModules(n *node, inv Inventory) []resource.Resource {
	var out []resource.Resource
	for i, left := 0, inv.MemoryMiB; left > 0; i++ {
		size := min(left, 8<<10)
		left -= size
		locator := fmt.Sprintf("DIMM %d", i)
		r := hardware.NewMemoryModuleInfo(locator)
		*r.TypedSpec() = hardware.MemoryModuleSpec{
			Size: uint32(size), DeviceLocator: locator, BankLocator: fmt.Sprintf("P0 CHANNEL %c", 'A'+i%26), Speed: 4800,
			Manufacturer: "Samsung", SerialNumber: serial(n, locator), ProductName: "M321R1GA0BB0-CQK",
		}
		out = append(out, r)
	}
	return out
}

func systemInformation(n *node, inv Inventory) []resource.Resource {
	spec := hardware.SystemInformationSpec{
		Manufacturer: "QEMU", ProductName: "Standard PC (Q35 + ICH9, 2009)", Version: "pc-q35-9.2",
		SerialNumber: serial(n, "system"), UUID: uuidOf(n.st.ID), WakeUpType: "Power Switch",
	}
	if n.st.Metal {
		spec.Manufacturer, spec.ProductName, spec.Version, spec.BIOSVersion = "Dell Inc.", "PowerEdge R250", "", "1.6.2"
	}
	if inv.Product != "" {
		spec.ProductName = inv.Product
	}
	r := hardware.NewSystemInformation(hardware.SystemInformationID)
	*r.TypedSpec() = spec
	return []resource.Resource{r}
}

func disks(n *node, inv Inventory) []resource.Resource {
	var out []resource.Resource
	for _, d := range inv.Disks {
		r := block.NewDisk(block.NamespaceName, d.Name)
		*r.TypedSpec() = block.DiskSpec{
			DevPath: "/dev/" + d.Name, Size: d.SizeBytes, PrettySize: prettySize(d.SizeBytes), IOSize: 512, SectorSize: 512,
			Model: d.Model, Serial: d.Serial, Transport: d.Transport, Rotational: d.Rotational,
			SubSystem: "/sys/class/block", WWID: "naa." + serial(n, "disk:"+d.Name),
		}
		if r.TypedSpec().Serial == "" {
			r.TypedSpec().Serial = serial(n, "serial:"+d.Name)
		}
		out = append(out, r)
	}
	return out
}

// systemDisk is the disk Talos is installed on, the first; none before
// it is (a bare-metal machine in maintenance mode), or without disks.
func systemDisk(n *node, inv Inventory) []resource.Resource {
	if len(inv.Disks) == 0 || n.st.Metal && !n.st.Installed {
		return nil
	}
	r := block.NewSystemDisk(block.NamespaceName, block.SystemDiskID)
	*r.TypedSpec() = block.SystemDiskSpec{DiskID: inv.Disks[0].Name, DevPath: "/dev/" + inv.Disks[0].Name}
	return []resource.Resource{r}
}

func hostnameStatus(n *node, _ Inventory) []resource.Resource {
	r := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	*r.TypedSpec() = network.HostnameStatusSpec{Hostname: n.hostname()}
	return []resource.Resource{r}
}

// nodeAddresses are the node's addresses under the IDs Talos gives them.
func nodeAddresses(_ *node, inv Inventory) []resource.Resource {
	var out []resource.Resource
	for _, id := range []resource.ID{network.NodeAddressAccumulativeID, network.NodeAddressCurrentID, network.NodeAddressDefaultID, network.NodeAddressRoutedID} {
		r := network.NewNodeAddress(network.NamespaceName, id)
		addrs := inv.Addresses
		if id == network.NodeAddressDefaultID && len(addrs) > 1 {
			addrs = addrs[:1]
		}
		*r.TypedSpec() = network.NodeAddressSpec{Addresses: append([]netip.Prefix(nil), addrs...), SortAlgorithm: nethelpers.AddressSortAlgorithmV2}
		out = append(out, r)
	}
	return out
}

// routes is the default route through the gateway on loopback.
func routes(_ *node, inv Inventory) []resource.Resource {
	spec := network.RouteStatusSpec{
		Family: nethelpers.FamilyInet4, Gateway: defaultGateway, OutLinkName: "eth0", OutLinkIndex: 2,
		Table: nethelpers.TableMain, Priority: 1024, Scope: nethelpers.ScopeGlobal, Type: nethelpers.TypeUnicast,
		Protocol: nethelpers.ProtocolStatic, MTU: 1500,
	}
	if len(inv.Addresses) > 0 {
		spec.Source = inv.Addresses[0].Addr()
	}
	r := network.NewRouteStatus(network.NamespaceName, network.RouteID(nethelpers.TableMain, nethelpers.FamilyInet4, netip.Prefix{}, defaultGateway, 1024, "eth0"))
	*r.TypedSpec() = spec
	return []resource.Resource{r}
}

// links are the loopback and one physical link, up at 10 Gbit/s, whose
// MAC follows from the machine's id.
func links(n *node, _ Inventory) []resource.Resource {
	lo := network.NewLinkStatus(network.NamespaceName, "lo")
	*lo.TypedSpec() = network.LinkStatusSpec{
		Index: 1, Type: nethelpers.LinkLoopbck, Flags: nethelpers.LinkFlags(nethelpers.LinkUp | nethelpers.LinkLoopback | nethelpers.LinkRunning | nethelpers.LinkLowerUp),
		HardwareAddr: make(nethelpers.HardwareAddr, 6), BroadcastAddr: make(nethelpers.HardwareAddr, 6), MTU: 65536, QueueDisc: "noqueue",
		OperationalState: nethelpers.OperStateUnknown, LinkState: true,
	}
	eth := network.NewLinkStatus(network.NamespaceName, "eth0")
	mac := macOf(n.st.ID)
	*eth.TypedSpec() = network.LinkStatusSpec{
		Index: 2, Type: nethelpers.LinkEther, Flags: nethelpers.LinkFlags(nethelpers.LinkUp | nethelpers.LinkBroadcast | nethelpers.LinkRunning | nethelpers.LinkMulticast | nethelpers.LinkLowerUp),
		HardwareAddr: mac, PermanentAddr: mac, BroadcastAddr: nethelpers.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, MTU: 1500, QueueDisc: "fq_codel",
		OperationalState: nethelpers.OperStateUp, Driver: "virtio_net", BusPath: "virtio1", LinkState: true, SpeedMegabits: 10000,
		Port: nethelpers.Other, Duplex: nethelpers.Full,
	}
	if n.st.Metal {
		eth.TypedSpec().Driver, eth.TypedSpec().BusPath, eth.TypedSpec().Port = "bnxt_en", "0000:01:00.0", nethelpers.Fibre
	}
	return []resource.Resource{lo, eth}
}

// extensionStatuses are the image's extensions, the schematic first,
// numbered as Talos numbers its layers.
func extensionStatuses(_ *node, inv Inventory) []resource.Resource {
	layers := []extensions.Metadata{{Name: "schematic", Version: SchematicID(inv.Extensions), Description: "Image schematic ID"}}
	for _, e := range inv.Extensions {
		layers = append(layers, extensions.Metadata{Name: e.Name, Version: e.Version, Author: "Sidero Labs",
			Description: "System extension " + e.Name, Compatibility: extensions.Compatibility{Talos: extensions.Constraint{Version: ">= v1.0.0"}}})
	}
	var out []resource.Resource
	for i, m := range layers {
		r := runtime.NewExtensionStatus(runtime.NamespaceName, strconv.Itoa(i))
		*r.TypedSpec() = runtime.ExtensionStatusSpec{Image: fmt.Sprintf("%03d.%s.sqsh", i, m.Name), Metadata: m}
		out = append(out, r)
	}
	return out
}

// serial is a serial number of a part of n.
func serial(n *node, part string) string {
	return hashHex([]byte("serial\x00" + n.st.ID + "\x00" + part))[:16]
}

// uuidOf is the SMBIOS UUID of a machine.
func uuidOf(id string) string {
	h := hashHex([]byte("uuid\x00" + id))
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// macOf is a locally administered unicast MAC derived from a machine id.
func macOf(id string) nethelpers.HardwareAddr {
	sum := fnv.New64a()
	sum.Write([]byte(id))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], sum.Sum64())
	return nethelpers.HardwareAddr(net.HardwareAddr{0x02, b[1], b[2], b[3], b[4], b[5]})
}

// prettySize is a size as Talos prints it (decimal units).
func prettySize(b uint64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	v, i := float64(b), 0
	for v >= 1000 && i < len(units)-1 {
		v, i = v/1000, i+1
	}
	return fmt.Sprintf("%.0f %s", v, units[i])
}
