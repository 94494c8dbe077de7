package talos

import (
	"fmt"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
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

// set retags the images of the components whose version v names, in the
// v1alpha1 document's fields of a config of the 1.12 contract and in the
// documents of their own of newer ones. A worker's config names only the
// kubelet and kube-proxy.
func (v ComponentVersions) set(cfg coreconfig.Provider) error {
	var images []componentImage
	if c := cfg.RawV1Alpha1(); c != nil {
		images = append(images, v.v1alpha1(c)...)
	}
	for _, doc := range cfg.Documents() {
		switch d := doc.(type) {
		case *k8s.KubeletConfigV1Alpha1:
			images = append(images, componentImage{ComponentKubelet, v.Kubelet, &d.KubeletImage})
		case *k8s.KubeAPIServerConfigV1Alpha1:
			images = append(images, componentImage{ComponentAPIServer, v.APIServer, &d.PodImage})
		case *k8s.KubeControllerManagerConfigV1Alpha1:
			images = append(images, componentImage{ComponentControllerManager, v.ControllerManager, &d.PodImage})
		case *k8s.KubeSchedulerConfigV1Alpha1:
			images = append(images, componentImage{ComponentScheduler, v.Scheduler, &d.PodImage})
		case *k8s.KubeProxyConfigV1Alpha1:
			images = append(images, componentImage{"kube-proxy", v.Kubelet, &d.ProxyImage})
		}
	}
	for _, ci := range images {
		if err := ci.retag(); err != nil {
			return err
		}
	}
	return nil
}

// v1alpha1 are the component images of the v1alpha1 document.
func (v ComponentVersions) v1alpha1(c *v1alpha1.Config) []componentImage {
	var out []componentImage
	if m := c.MachineConfig; m != nil && m.MachineKubelet != nil {
		out = append(out, componentImage{ComponentKubelet, v.Kubelet, &m.MachineKubelet.KubeletImage})
	}
	if cl := c.ClusterConfig; cl != nil {
		if a := cl.APIServerConfig; a != nil {
			out = append(out, componentImage{ComponentAPIServer, v.APIServer, &a.ContainerImage})
		}
		if cm := cl.ControllerManagerConfig; cm != nil {
			out = append(out, componentImage{ComponentControllerManager, v.ControllerManager, &cm.ContainerImage})
		}
		if s := cl.SchedulerConfig; s != nil {
			out = append(out, componentImage{ComponentScheduler, v.Scheduler, &s.ContainerImage})
		}
		if p := cl.ProxyConfig; p != nil {
			out = append(out, componentImage{"kube-proxy", v.Kubelet, &p.ContainerImage})
		}
	}
	return out
}

// componentImage is one component's image field and the version it must
// name ("" to leave it).
type componentImage struct {
	name, version string
	image         *string
}

// retag sets the image's tag to the version.
func (ci componentImage) retag() error {
	if ci.version == "" || *ci.image == "" {
		return nil
	}
	version := strings.TrimPrefix(ci.version, "v")
	if !kubernetesVersionRE.MatchString(version) {
		return fmt.Errorf("%s version %q: not of the form 1.34.1", ci.name, ci.version)
	}
	image := *ci.image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	*ci.image = image + ":v" + version
	return nil
}
