package talosnode

import (
	"slices"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
)

// TestComponentsOf: a control plane's config names its kubelet's version,
// its three static pods with their images, and the API server's
// arguments (the release it emulates, the config's runtime-config); a
// worker's names its kubelet only.
func TestComponentsOf(t *testing.T) {
	s := bundle(t, "components")
	cp := componentsOf(machineConfig(t, s, "controlplane", false,
		"cluster:\n  apiServer:\n    extraArgs:\n      runtime-config: networking.k8s.io/v1beta1=true\n"))
	if cp.kubelet != "v1.34.1" {
		t.Errorf("kubelet %q", cp.kubelet)
	}
	want := []kubelet.StaticPod{
		{Component: "kube-apiserver", Image: "registry.k8s.io/kube-apiserver:v1.34.1"},
		{Component: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.34.1"},
		{Component: "kube-scheduler", Image: "registry.k8s.io/kube-scheduler:v1.34.1"},
	}
	if !slices.Equal(cp.static, want) {
		t.Errorf("static pods %v, want %v", cp.static, want)
	}
	if args := []string{"--emulated-version=kube=1.34", "--runtime-config=networking.k8s.io/v1beta1=true"}; !slices.Equal(cp.apiServerArgs, args) {
		t.Errorf("API server arguments %q, want %q", cp.apiServerArgs, args)
	}
	w := componentsOf(machineConfig(t, s, "worker", false))
	if w.kubelet != "v1.34.1" || len(w.static) != 0 {
		t.Errorf("worker: %+v", w)
	}
}
