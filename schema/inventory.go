package schema

import (
	"strconv"
	"strings"
)

// MachineHardware is what a machine's Talos reports of its hardware
// (COSI hardware.Processor, hardware.MemoryModule,
// hardware.SystemInformation, block.Disk and block.SystemDisk).
type MachineHardware struct {
	// Arch is the machine's architecture as Go names it (amd64, arm64),
	// from Version.
	Arch string `json:"arch,omitempty"`
	// CPUs is the number of hardware threads of all processors;
	// MemoryMiB the size of all memory modules.
	CPUs      int `json:"cpus"`
	MemoryMiB int `json:"memoryMiB"`
	// System is the SMBIOS system information; nil when none is served.
	System        *SystemInformation `json:"system,omitempty"`
	Processors    []Processor        `json:"processors,omitempty"`
	MemoryModules []MemoryModule     `json:"memoryModules,omitempty"`
	// BlockDevices are the machine's disks, sorted by name; the one
	// Talos is installed on has SystemDisk.
	BlockDevices []BlockDevice `json:"blockDevices,omitempty"`
}

// SystemInformation is a machine's SMBIOS system information.
type SystemInformation struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	ProductName  string `json:"productName,omitempty"`
	Version      string `json:"version,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
	UUID         string `json:"uuid,omitempty"`
}

// Processor is one processor socket.
type Processor struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	ProductName  string `json:"productName,omitempty"`
	CoreCount    int    `json:"coreCount"`
	ThreadCount  int    `json:"threadCount"`
	// MaxSpeedMHz is the processor's maximum speed.
	MaxSpeedMHz int `json:"maxSpeedMHz,omitempty"`
}

// MemoryModule is one memory module.
type MemoryModule struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	Description  string `json:"description,omitempty"`
	SizeMiB      int    `json:"sizeMiB"`
}

// BlockDevice is one disk.
type BlockDevice struct {
	// Name is the device's name (sda, nvme0n1); Path is /dev/ and it.
	Name      string `json:"name"`
	Path      string `json:"path,omitempty"`
	SizeBytes uint64 `json:"sizeBytes"`
	Model     string `json:"model,omitempty"`
	Serial    string `json:"serial,omitempty"`
	WWID      string `json:"wwid,omitempty"`
	// Transport is how it is attached: virtio, sata, nvme, ...
	Transport  string `json:"transport,omitempty"`
	Rotational bool   `json:"rotational,omitempty"`
	// SystemDisk: Talos is installed on it (block.SystemDisk).
	SystemDisk bool `json:"systemDisk,omitempty"`
}

// MachineNetwork is what a machine's Talos reports of its network
// (network.HostnameStatus, network.NodeAddress, network.RouteStatus,
// network.LinkStatus).
type MachineNetwork struct {
	Hostname   string `json:"hostname,omitempty"`
	Domainname string `json:"domainname,omitempty"`
	// Addresses are the node's addresses in CIDR notation (NodeAddress
	// "current"), sorted.
	Addresses []string `json:"addresses,omitempty"`
	// DefaultGateways are the gateways of the default routes, sorted.
	DefaultGateways []string `json:"defaultGateways,omitempty"`
	// Links are the physical links, sorted by name.
	Links []NetworkLink `json:"links,omitempty"`
}

// NetworkLink is one network link.
type NetworkLink struct {
	Name            string `json:"name"`
	HardwareAddress string `json:"hardwareAddress,omitempty"`
	SpeedMbps       int    `json:"speedMbps,omitempty"`
	Up              bool   `json:"up"`
	// OperationalState is the kernel's: up, down, unknown, ...
	OperationalState string `json:"operationalState,omitempty"`
}

// MachineSchematic is the image schematic a machine runs
// (runtime.ExtensionStatus: the "schematic" extension's version is the
// ID, the others are the extensions it holds).
type MachineSchematic struct {
	ID         string      `json:"id,omitempty"`
	Extensions []Extension `json:"extensions,omitempty"`
}

// Extension is one system extension of a machine's image.
type Extension struct {
	Name        string `json:"name"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
}

// Labels derived from a machine's inventory. The server sets them on a
// Machine's metadata.labels from status.hardware (SetHardwareLabels), so
// that label selectors select machines by what they are; git never
// declares them.
const (
	// LabelHardwarePrefix is the prefix of every derived label.
	LabelHardwarePrefix = "hardware.rezuscloud.io/"
	// LabelHardwareCPUs is the number of hardware threads.
	LabelHardwareCPUs = LabelHardwarePrefix + "cpus"
	// LabelHardwareMemoryGiB is the memory in GiB, rounded down.
	LabelHardwareMemoryGiB = LabelHardwarePrefix + "memory-gib"
	// LabelHardwareArch is the architecture (amd64, arm64).
	LabelHardwareArch = LabelHardwarePrefix + "arch"
	// LabelHardwareSystemDiskGiB is the size of the system disk in GiB,
	// rounded down.
	LabelHardwareSystemDiskGiB = LabelHardwarePrefix + "system-disk-gib"
)

// HardwareLabels returns the labels derived from h; none for nil.
func HardwareLabels(h *MachineHardware) map[string]string {
	if h == nil {
		return nil
	}
	l := map[string]string{}
	if h.CPUs > 0 {
		l[LabelHardwareCPUs] = strconv.Itoa(h.CPUs)
	}
	if h.MemoryMiB > 0 {
		l[LabelHardwareMemoryGiB] = strconv.Itoa(h.MemoryMiB / 1024)
	}
	if h.Arch != "" && validLabelValue(h.Arch) {
		l[LabelHardwareArch] = h.Arch
	}
	for _, d := range h.BlockDevices {
		if d.SystemDisk {
			l[LabelHardwareSystemDiskGiB] = strconv.FormatUint(d.SizeBytes>>30, 10)
		}
	}
	return l
}

// SetHardwareLabels makes m's derived labels those of h: it drops every
// label under LabelHardwarePrefix and sets HardwareLabels(h).
func SetHardwareLabels(m *ObjectMeta, h *MachineHardware) {
	for k := range m.Labels {
		if strings.HasPrefix(k, LabelHardwarePrefix) {
			delete(m.Labels, k)
		}
	}
	derived := HardwareLabels(h)
	if len(derived) == 0 {
		return
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	for k, v := range derived {
		m.Labels[k] = v
	}
}

// validLabelValue reports whether s may be a label value: at most 63 of
// letters, digits, '-', '_' and '.', starting and ending with a letter or
// digit.
func validLabelValue(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, c := range s {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}
