package talos

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
)

// CheckVersions reports whether Talos talosVersion supports Kubernetes
// kubernetesVersion (both "x.y.z", with or without a leading v), and
// whether this build can render configs for that Talos version at all.
// MachineConfig checks the same; callers can check early, when manifests
// are loaded.
func CheckVersions(talosVersion, kubernetesVersion string) error {
	if _, err := parseContract(talosVersion); err != nil {
		return err
	}
	tag := "v" + strings.TrimPrefix(talosVersion, "v")
	talos, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: tag})
	if err != nil {
		return fmt.Errorf("talos version %q: %w", talosVersion, err)
	}
	if !kubernetesVersionRE.MatchString(strings.TrimPrefix(kubernetesVersion, "v")) {
		return fmt.Errorf("kubernetes version %q: not of the form 1.34.1", kubernetesVersion)
	}
	k8s, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kubernetesVersion, "v"))
	if err != nil {
		return fmt.Errorf("kubernetes version %q: %w", kubernetesVersion, err)
	}
	if err := k8s.SupportedWith(talos); err != nil {
		return fmt.Errorf("kubernetes version %q with talos version %q: %w", kubernetesVersion, talosVersion, err)
	}
	return nil
}
