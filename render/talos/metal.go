package talos

import (
	"fmt"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// MetalMachineConfig returns the config of one bare-metal machine: its
// node group's config with the machine's static host name (when given) and
// install disk, validated in metal mode. The same input gives the same
// bytes.
func MetalMachineConfig(groupConfig []byte, hostname, installDisk string) ([]byte, error) {
	cfg, err := configloader.NewFromBytes(groupConfig)
	if err != nil {
		return nil, fmt.Errorf("metal machine config: %w", err)
	}
	want := cfg.Machine().Type()
	var patches []Patch
	if installDisk != "" {
		patches = append(patches, Patch{Name: "install-disk", Patch: "machine:\n  install:\n    disk: " + strconv.Quote(installDisk) + "\n"})
	}
	if hostname != "" {
		patches = append(patches, HostnamePatch(hostname))
	}
	for _, p := range patches {
		if cfg, err = applyPatch(cfg, p, want); err != nil {
			return nil, fmt.Errorf("metal machine config: %s: %w", p.Name, err)
		}
	}
	out, err := encodeValid(cfg, ModeMetal)
	if err != nil {
		return nil, fmt.Errorf("metal machine config: %w", err)
	}
	return out, nil
}
