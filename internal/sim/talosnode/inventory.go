package talosnode

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Hardware is what a simulated machine is built of: its processor
// threads, its memory and its disks. The nodes serve it as Talos does,
// through the hardware and block resources (inventory_resources.go).
type Hardware struct {
	// CPUs is the number of hardware threads of the machine's one
	// processor socket.
	CPUs int `json:"cpus"`
	// MemoryMiB is its memory, served as modules of up to 8 GiB.
	MemoryMiB int `json:"memoryMiB"`
	// Disks are its disks; Talos is installed on the first.
	Disks []Disk `json:"disks"`
	// Product is the SMBIOS product name; empty for a default by kind of
	// machine.
	Product string `json:"product,omitempty"`
}

// Disk is one disk of a machine.
type Disk struct {
	// Name is the kernel's name of it (vda, sda, nvme0n1).
	Name      string `json:"name"`
	SizeBytes uint64 `json:"sizeBytes"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
	// Transport is how it is attached: virtio, sata, nvme.
	Transport  string `json:"transport,omitempty"`
	Rotational bool   `json:"rotational,omitempty"`
}

// Extension is a system extension of a machine's image.
type Extension struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Inventory is everything a node serves about itself besides its stage:
// its hardware, its addresses and the extensions of its image. Tests
// change it with Host.SetInventory, or from outside with a fault's Disks
// and Addresses.
type Inventory struct {
	Hardware
	// Addresses are the node's addresses; by default its loopback
	// address in 127.0.0.0/8.
	Addresses []netip.Prefix `json:"addresses"`
	// Extensions are its image's extensions, besides the schematic,
	// whose ID follows from them (SchematicID).
	Extensions []Extension `json:"extensions"`
}

const gib = 1 << 30

// VMHardware is the hardware of a virtual machine of cpus threads,
// memMiB of memory and one virtio disk vda of diskGiB.
func VMHardware(cpus, memMiB, diskGiB int) Hardware {
	return Hardware{CPUs: cpus, MemoryMiB: memMiB, Disks: []Disk{{
		Name: "vda", SizeBytes: uint64(diskGiB) * gib, Model: "QEMU HARDDISK", Transport: "virtio",
	}}}
}

// ShapeHardware is the hardware of a sim cloud machine of a shape
// (small, medium, large): 2 threads, 4 GiB and 40 GiB of disk, twice
// that, and four times; an unknown shape is small.
func ShapeHardware(shape string) Hardware {
	switch shape {
	case "medium":
		return VMHardware(4, 8<<10, 80)
	case "large":
		return VMHardware(8, 16<<10, 160)
	}
	return VMHardware(2, 4<<10, 40)
}

// MetalHardware is the hardware of a bare-metal machine started without
// its own (StartMaintenance): 8 threads, 32 GiB, an NVMe disk for Talos
// and a spinning SATA disk for data.
func MetalHardware() Hardware {
	return Hardware{CPUs: 8, MemoryMiB: 32 << 10, Product: "PowerEdge R250", Disks: []Disk{
		{Name: "nvme0n1", SizeBytes: 512 * 1000 * 1000 * 1000, Model: "Samsung SSD 980 PRO 500GB", Transport: "nvme"},
		{Name: "sda", SizeBytes: 2000 * 1000 * 1000 * 1000, Model: "ST2000NM000A", Transport: "sata", Rotational: true},
	}}
}

// check says what is wrong with hardware a caller gives.
func (hw Hardware) check() error {
	switch {
	case hw.CPUs < 1:
		return fmt.Errorf("hardware: %d CPUs, want at least 1", hw.CPUs)
	case hw.MemoryMiB < 1:
		return fmt.Errorf("hardware: %d MiB of memory, want at least 1", hw.MemoryMiB)
	}
	return checkDisks(hw.Disks)
}

func checkDisks(disks []Disk) error {
	seen := map[string]bool{}
	for _, d := range disks {
		if d.Name == "" || strings.ContainsAny(d.Name, "/ ") || seen[d.Name] {
			return fmt.Errorf("hardware: disk name %q is empty, repeated or not a device name", d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

// clone returns a copy of hw that shares no slices with it.
func (hw Hardware) clone() Hardware {
	hw.Disks = slices.Clone(hw.Disks)
	return hw
}

// clone returns a copy of inv that shares no slices with it.
func (inv Inventory) clone() Inventory {
	inv.Disks = slices.Clone(inv.Disks)
	inv.Addresses = slices.Clone(inv.Addresses)
	inv.Extensions = slices.Clone(inv.Extensions)
	return inv
}

// defaultExtensions are the extensions of a machine's image: the guest
// agent on virtual machines, iSCSI and util-linux tools on metal.
func defaultExtensions(metal bool) []Extension {
	if metal {
		return []Extension{{Name: "iscsi-tools", Version: "v0.2.0"}, {Name: "util-linux-tools", Version: "2.41.1"}}
	}
	return []Extension{{Name: "qemu-guest-agent", Version: "10.0.2"}}
}

// SchematicID is the image schematic ID of a set of extensions, as the
// image factory derives it from the schematic: the same extensions give
// the same 64 hex digits, whatever their order.
func SchematicID(exts []Extension) string {
	names := make([]string, 0, len(exts))
	for _, e := range exts {
		names = append(names, "siderolabs/"+e.Name)
	}
	sort.Strings(names)
	return hashHex([]byte("customization:\n  systemExtensions:\n    officialExtensions:\n      - " + strings.Join(names, "\n      - ") + "\n"))
}

// inventory is n's inventory as it serves it now: what a test set
// (st.Inventory), else what follows from its hardware, and then the
// disks and addresses its fault replaces. Called with h.mu held.
func (n *node) inventory() Inventory {
	var inv Inventory
	if n.st.Inventory != nil {
		inv = n.st.Inventory.clone()
	} else {
		inv = n.baseInventory()
	}
	if len(n.fault.Disks) > 0 {
		inv.Disks = slices.Clone(n.fault.Disks)
	}
	if len(n.fault.Addresses) > 0 {
		inv.Addresses = nil
		for _, s := range n.fault.Addresses {
			if p, err := parseAddress(s); err == nil {
				inv.Addresses = append(inv.Addresses, p)
			}
		}
	}
	return inv
}

// baseInventory is what n is made of before any test changed it.
func (n *node) baseInventory() Inventory {
	var hw Hardware
	switch {
	case n.st.Hardware != nil:
		hw = *n.st.Hardware
		hw.Disks = slices.Clone(hw.Disks)
	case n.st.Metal:
		hw = MetalHardware()
	default:
		hw = ShapeHardware("")
	}
	return Inventory{
		Hardware:   hw,
		Addresses:  []netip.Prefix{netip.PrefixFrom(n.addr, 8)},
		Extensions: defaultExtensions(n.st.Metal),
	}
}

// parseAddress parses an address in CIDR notation, or a bare address as
// one of 127.0.0.0/8 (/32 outside it).
func parseAddress(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("address %q: neither an address nor one in CIDR notation", s)
	}
	if a.Is4() && a.As4()[0] == 127 {
		return netip.PrefixFrom(a, 8), nil
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// check says what is wrong with an inventory a test sets.
func (inv Inventory) check() error {
	if err := inv.Hardware.check(); err != nil {
		return err
	}
	for _, p := range inv.Addresses {
		if !p.IsValid() {
			return fmt.Errorf("inventory: address %v is not valid", p)
		}
	}
	for _, e := range inv.Extensions {
		if e.Name == "" || e.Name == "schematic" {
			return fmt.Errorf("inventory: extension name %q is empty or reserved", e.Name)
		}
	}
	return nil
}

// SetInventory changes what the node key (machine id, name, host name or
// address) serves about itself: edit gets its inventory as it is (without
// what a fault replaces) and changes it; nil goes back to what follows
// from its hardware. The change is kept on the node's disk, and the
// watches of the resources it changes fire.
func (h *Host) SetInventory(key string, edit func(*Inventory)) error {
	h.mu.Lock()
	n := h.lookup(key)
	if n == nil {
		h.mu.Unlock()
		return fmt.Errorf("set inventory: no machine %q", key)
	}
	if edit == nil {
		n.st.Inventory = nil
	} else {
		inv := n.baseInventory()
		if n.st.Inventory != nil {
			inv = n.st.Inventory.clone()
		}
		edit(&inv)
		if err := inv.check(); err != nil {
			h.mu.Unlock()
			return fmt.Errorf("set inventory of %s: %w", key, err)
		}
		inv = inv.clone()
		n.st.Inventory = &inv
	}
	save := h.changed(n)
	h.mu.Unlock()
	return save()
}

// Inventory returns what the node key serves about itself now, faults
// included.
func (h *Host) Inventory(key string) (Inventory, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.lookup(key)
	if n == nil {
		return Inventory{}, false
	}
	return n.inventory(), true
}
