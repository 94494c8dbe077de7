package talos

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/schema"
)

// The parts of a machine's inventory, each read as a whole (every COSI
// kind it comes from listed) when the machine connects and when a watch
// says one of its kinds changed.
type inventoryPart uint8

const (
	partHardware inventoryPart = 1 << iota
	partNetwork
	partSchematic

	allInventory = partHardware | partNetwork | partSchematic
)

// readInventory reads the parts of the inventory in parts into o; a part
// the machine serves none of stays nil. A failed read leaves its part
// nil (the status keeps the last one read) and is returned.
func (o *Observation) readInventory(ctx context.Context, c *client.Client, arch string, parts inventoryPart) error {
	var errs []error
	if parts&partHardware != 0 {
		h, err := readHardware(ctx, c.COSI)
		if h != nil {
			h.Arch = arch
		}
		o.Hardware = h
		errs = append(errs, err)
	}
	if parts&partNetwork != 0 {
		n, err := readNetwork(ctx, c.COSI)
		o.Network = n
		errs = append(errs, err)
	}
	if parts&partSchematic != 0 {
		s, err := readSchematic(ctx, c.COSI)
		o.Schematic = s
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// listKind lists the resources of T's kind in namespace ns; served is false
// when the machine serves no such kind (an older Talos, or a simulated
// node without it), which is not an error.
func listKind[T resource.Resource](ctx context.Context, st state.CoreState, ns resource.Namespace, typ resource.Type) (items []T, served bool, err error) {
	l, err := safe.StateList[T](ctx, st, resource.NewMetadata(ns, typ, "", resource.VersionUndefined))
	if unserved(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, errors.New(callError("list "+typ, err))
	}
	return slices.Collect(l.All()), true, nil
}

// unserved reports whether err is a machine's answer that it serves no
// resources of a kind.
func unserved(err error) bool {
	switch codeOf(err) {
	case codes.NotFound, codes.Unimplemented:
		return true
	case codes.PermissionDenied:
		return strings.Contains(err.Error(), "not supported")
	}
	return false
}

// readHardware reads processors, memory modules, system information, the
// disks and the system disk; nil when the machine serves none of them.
func readHardware(ctx context.Context, st state.CoreState) (*schema.MachineHardware, error) {
	h := &schema.MachineHardware{}
	procs, s1, err1 := listKind[*hardware.Processor](ctx, st, hardware.NamespaceName, hardware.ProcessorType)
	for _, p := range procs {
		sp := p.TypedSpec()
		h.Processors = append(h.Processors, schema.Processor{Manufacturer: intern(sp.Manufacturer), ProductName: intern(sp.ProductName),
			CoreCount: int(sp.CoreCount), ThreadCount: int(sp.ThreadCount), MaxSpeedMHz: int(sp.MaxSpeed)})
		h.CPUs += int(max(sp.ThreadCount, sp.CoreCount))
	}
	mems, s2, err2 := listKind[*hardware.MemoryModule](ctx, st, hardware.NamespaceName, hardware.MemoryModuleType)
	for _, m := range mems {
		sp := m.TypedSpec()
		h.MemoryModules = append(h.MemoryModules, schema.MemoryModule{Manufacturer: intern(sp.Manufacturer),
			Description: intern(strings.TrimSpace(sp.DeviceLocator + " " + sp.BankLocator)), SizeMiB: int(sp.Size)})
		h.MemoryMiB += int(sp.Size)
	}
	sys, s3, err3 := listKind[*hardware.SystemInformation](ctx, st, hardware.NamespaceName, hardware.SystemInformationType)
	for _, s := range sys {
		sp := s.TypedSpec()
		h.System = &schema.SystemInformation{Manufacturer: intern(sp.Manufacturer), ProductName: intern(sp.ProductName),
			Version: intern(sp.Version), SerialNumber: sp.SerialNumber, UUID: sp.UUID}
	}
	disks, s4, err4 := readDisks(ctx, st)
	h.BlockDevices = disks
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	if !s1 && !s2 && !s3 && !s4 {
		return nil, nil
	}
	return h, nil
}

// readDisks reads block.Disk and block.SystemDisk: the disks sorted by
// name, the system disk marked. CD-ROMs are left out.
func readDisks(ctx context.Context, st state.CoreState) ([]schema.BlockDevice, bool, error) {
	disks, served, err := listKind[*block.Disk](ctx, st, block.NamespaceName, block.DiskType)
	if err != nil || !served {
		return nil, served, err
	}
	sys, _, err := listKind[*block.SystemDisk](ctx, st, block.NamespaceName, block.SystemDiskType)
	if err != nil {
		return nil, true, err
	}
	system := ""
	for _, s := range sys {
		system = s.TypedSpec().DiskID
	}
	var out []schema.BlockDevice
	for _, d := range disks {
		sp := d.TypedSpec()
		if sp.CDROM {
			continue
		}
		name := d.Metadata().ID()
		out = append(out, schema.BlockDevice{Name: intern(name), Path: intern(sp.DevPath), SizeBytes: sp.Size, Model: intern(sp.Model),
			Serial: sp.Serial, WWID: sp.WWID, Transport: intern(sp.Transport), Rotational: sp.Rotational, SystemDisk: name == system})
	}
	slices.SortFunc(out, func(a, b schema.BlockDevice) int { return strings.Compare(a.Name, b.Name) })
	return out, true, nil
}

// readNetwork reads the host name, the current node addresses, the
// default routes' gateways and the physical links; nil when the machine
// serves none of them.
func readNetwork(ctx context.Context, st state.CoreState) (*schema.MachineNetwork, error) {
	n := &schema.MachineNetwork{}
	hosts, s1, err1 := listKind[*network.HostnameStatus](ctx, st, network.NamespaceName, network.HostnameStatusType)
	for _, h := range hosts {
		n.Hostname, n.Domainname = h.TypedSpec().Hostname, h.TypedSpec().Domainname
	}
	addrs, s2, err2 := listKind[*network.NodeAddress](ctx, st, network.NamespaceName, network.NodeAddressType)
	for _, a := range addrs {
		if a.Metadata().ID() != network.NodeAddressCurrentID {
			continue
		}
		for _, p := range a.TypedSpec().Addresses {
			n.Addresses = append(n.Addresses, p.String())
		}
	}
	routes, s3, err3 := listKind[*network.RouteStatus](ctx, st, network.NamespaceName, network.RouteStatusType)
	for _, r := range routes {
		sp := r.TypedSpec()
		// A default route has no destination (or a /0 one) and a gateway.
		if (!sp.Destination.IsValid() || sp.Destination.Bits() == 0) && sp.Gateway.IsValid() && !slices.Contains(n.DefaultGateways, sp.Gateway.String()) {
			n.DefaultGateways = append(n.DefaultGateways, sp.Gateway.String())
		}
	}
	links, s4, err4 := listKind[*network.LinkStatus](ctx, st, network.NamespaceName, network.LinkStatusType)
	for _, l := range links {
		sp := l.TypedSpec()
		if !sp.Physical() {
			continue
		}
		n.Links = append(n.Links, schema.NetworkLink{Name: intern(l.Metadata().ID()), HardwareAddress: sp.HardwareAddr.String(),
			SpeedMbps: max(sp.SpeedMegabits, 0), Up: sp.LinkState, OperationalState: intern(sp.OperationalState.String())})
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	if !s1 && !s2 && !s3 && !s4 {
		return nil, nil
	}
	slices.Sort(n.Addresses)
	slices.Sort(n.DefaultGateways)
	slices.SortFunc(n.Links, func(a, b schema.NetworkLink) int { return strings.Compare(a.Name, b.Name) })
	return n, nil
}

// schematicExtension is the name of the extension whose version is the
// ID of the image's schematic.
const schematicExtension = "schematic"

// readSchematic reads the extensions: the schematic's ID and the others
// with their versions, sorted by name; nil when the machine serves none.
func readSchematic(ctx context.Context, st state.CoreState) (*schema.MachineSchematic, error) {
	exts, served, err := listKind[*runtime.ExtensionStatus](ctx, st, runtime.NamespaceName, runtime.ExtensionStatusType)
	if err != nil || !served {
		return nil, err
	}
	s := &schema.MachineSchematic{}
	for _, e := range exts {
		md := e.TypedSpec().Metadata
		if md.Name == schematicExtension {
			s.ID = intern(md.Version)
			continue
		}
		s.Extensions = append(s.Extensions, schema.Extension{Name: intern(md.Name), Version: intern(md.Version), Description: intern(md.Description)})
	}
	slices.SortFunc(s.Extensions, func(a, b schema.Extension) int { return strings.Compare(a.Name, b.Name) })
	return s, nil
}
