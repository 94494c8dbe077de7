package talosnode

import (
	"slices"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
	"github.com/rezuscloud/rezuscloud/render/talos"
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

	// Talos 1.14's layout: each component has a document of its own.
	b, err := talos.MachineConfig(talos.ConfigInput{
		ClusterName: "acme", ControlPlaneEndpoint: "https://127.9.9.9:6443", KubernetesVersion: "1.34.1", TalosVersion: "1.14.1",
		Role: "controlplane", Secrets: s, Now: testNow, Patches: []talos.Patch{{Name: "rc",
			Patch: "apiVersion: v1alpha1\nkind: KubeAPIServerConfig\nextraArgs:\n  runtime-config: networking.k8s.io/v1beta1=true\n"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := componentsOf(b); c.kubelet != cp.kubelet || !slices.Equal(c.static, cp.static) || !slices.Equal(c.apiServerArgs, cp.apiServerArgs) {
		t.Errorf("a Talos 1.14 control plane: %+v, want %+v", c, cp)
	}
}
