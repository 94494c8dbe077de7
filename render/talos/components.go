package talos

import (
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// ComponentVersions are the versions ("1.34.1", with or without a leading
// v) of the Kubernetes components a machine config runs, when they are not
// the config's KubernetesVersion: an upgrade of Kubernetes moves them one
// at a time, as `talosctl upgrade-k8s` does. An empty field follows
// KubernetesVersion.
type ComponentVersions struct {
	APIServer, ControllerManager, Scheduler string
	// Kubelet is the kubelet's version, and kube-proxy's with it.
	Kubelet string
}

// The components in the order an upgrade of Kubernetes moves them.
const (
	ComponentAPIServer         = "kube-apiserver"
	ComponentControllerManager = "kube-controller-manager"
	ComponentScheduler         = "kube-scheduler"
	ComponentKubelet           = "kubelet"
)

// UpgradeOrder is the order in which an upgrade of Kubernetes moves the
// components: the API servers, then the controller-managers, then the
// schedulers, on each control plane in turn; then the kubelets, node by
// node.
var UpgradeOrder = []string{ComponentAPIServer, ComponentControllerManager, ComponentScheduler, ComponentKubelet}

// Holding returns the versions of a config on the way from one Kubernetes
// version to another, once the components of UpgradeOrder before index
// next are at to: the others are held at from. next == len(UpgradeOrder)
// holds none back.
func Holding(from string, next int) ComponentVersions {
	var v ComponentVersions
	for _, c := range UpgradeOrder[min(next, len(UpgradeOrder)):] {
		switch c {
		case ComponentAPIServer:
			v.APIServer = from
		case ComponentControllerManager:
			v.ControllerManager = from
		case ComponentScheduler:
			v.Scheduler = from
		case ComponentKubelet:
			v.Kubelet = from
		}
	}
	return v
}

// set retags the images of the components whose version v names. A
// worker's config names only the kubelet and kube-proxy.
func (v ComponentVersions) set(c *v1alpha1.Config) error {
	retag := func(name, version string, image *string) error {
		if version == "" || *image == "" {
			return nil
		}
		version = strings.TrimPrefix(version, "v")
		if !kubernetesVersionRE.MatchString(version) {
			return fmt.Errorf("%s version %q: not of the form 1.34.1", name, version)
		}
		if i := strings.LastIndex(*image, ":"); i > strings.LastIndex(*image, "/") {
			*image = (*image)[:i]
		}
		*image += ":v" + version
		return nil
	}
	var errs []error
	if m := c.MachineConfig; m != nil && m.MachineKubelet != nil {
		errs = append(errs, retag(ComponentKubelet, v.Kubelet, &m.MachineKubelet.KubeletImage))
	}
	if cl := c.ClusterConfig; cl != nil {
		if a := cl.APIServerConfig; a != nil {
			errs = append(errs, retag(ComponentAPIServer, v.APIServer, &a.ContainerImage))
		}
		if cm := cl.ControllerManagerConfig; cm != nil {
			errs = append(errs, retag(ComponentControllerManager, v.ControllerManager, &cm.ContainerImage))
		}
		if s := cl.SchedulerConfig; s != nil {
			errs = append(errs, retag(ComponentScheduler, v.Scheduler, &s.ContainerImage))
		}
		if p := cl.ProxyConfig; p != nil {
			errs = append(errs, retag("kube-proxy", v.Kubelet, &p.ContainerImage))
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
