package talos

import (
	"bytes"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// TestComponentVersions: on the way from Kubernetes 1.34.1 to 1.35.0, a
// control plane's config holds back the components after the one being
// moved, a worker's its kubelet, and once none is held
// back the config is byte for byte the one of 1.35.0. A patch that pins an
// image keeps it. Both the 1.12 contract's layout and 1.14's documents of
// their own (KubeAPIServerConfig, ...) hold them.
func TestComponentVersions(t *testing.T) {
	images := func(t *testing.T, in ConfigInput) map[string]string {
		t.Helper()
		out, err := MachineConfig(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configloader.NewFromBytes(out)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{ComponentKubelet: cfg.K8sKubeletConfig().Image()}
		if cfg.Machine().Type().IsControlPlane() {
			got[ComponentAPIServer] = cfg.K8sAPIServerConfig().Image()
			got[ComponentControllerManager] = cfg.K8sControllerManagerConfig().Image()
			got[ComponentScheduler] = cfg.K8sSchedulerConfig().Image()
			got["kube-proxy"] = cfg.K8sProxyConfig().Image()
		}
		return got
	}
	for _, contract := range []string{"1.12.6", "1.14.1"} {
		t.Run("talos "+contract, func(t *testing.T) {
			componentVersions(t, contract, images)
		})
	}
}

// componentVersions is TestComponentVersions for one Talos version.
func componentVersions(t *testing.T, talosVersion string, images func(*testing.T, ConfigInput) map[string]string) {
	tag := func(image string) string { return image[strings.LastIndex(image, ":")+1:] }

	cp := baseInput(t, RoleControlPlane)
	cp.TalosVersion = talosVersion
	cp.KubernetesVersion = "1.35.0"
	for next, want := range []map[string]string{
		{ComponentAPIServer: "v1.35.0", ComponentControllerManager: "v1.34.1", ComponentScheduler: "v1.34.1", ComponentKubelet: "v1.34.1", "kube-proxy": "v1.34.1"},
		{ComponentAPIServer: "v1.35.0", ComponentControllerManager: "v1.35.0", ComponentScheduler: "v1.34.1", ComponentKubelet: "v1.34.1", "kube-proxy": "v1.34.1"},
		{ComponentAPIServer: "v1.35.0", ComponentControllerManager: "v1.35.0", ComponentScheduler: "v1.35.0", ComponentKubelet: "v1.34.1", "kube-proxy": "v1.34.1"},
	} {
		in := cp
		in.Components = Holding("1.34.1", next+1)
		got := images(t, in)
		for c, v := range want {
			if tag(got[c]) != v {
				t.Errorf("moving %s: %s is %s, want %s", UpgradeOrder[next], c, got[c], v)
			}
		}
	}
	w := baseInput(t, RoleWorker)
	w.TalosVersion = talosVersion
	w.KubernetesVersion = "1.35.0"
	w.Components = Holding("1.34.1", 1)
	if got := images(t, w); tag(got[ComponentKubelet]) != "v1.34.1" {
		t.Errorf("a worker while the API servers move: %v", got)
	}

	for _, in := range []ConfigInput{cp, w} {
		in.Components = ComponentVersions{}
		plain, err := MachineConfig(in)
		if err != nil {
			t.Fatal(err)
		}
		in.Components = Holding("1.34.1", len(UpgradeOrder))
		moved, err := MachineConfig(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(plain, moved) {
			t.Errorf("%s: the config with every component moved differs from the one of 1.35.0", in.Role)
		}
	}

	pinned := cp
	pinned.Components = Holding("1.34.1", 0)
	pin := "cluster:\n  apiServer:\n    image: registry.example/kube-apiserver:v1.35.0-custom\n"
	if talosVersion != "1.12.6" { // the API server has a document of its own
		pin = "apiVersion: v1alpha1\nkind: KubeAPIServerConfig\nimage: registry.example/kube-apiserver:v1.35.0-custom\n"
	}
	pinned.Patches = []Patch{{Name: "pin", Patch: pin}}
	if got := images(t, pinned); got[ComponentAPIServer] != "registry.example/kube-apiserver:v1.35.0-custom" {
		t.Errorf("a pinned image: %s", got[ComponentAPIServer])
	}

	bad := cp
	bad.Components = ComponentVersions{Kubelet: "latest"}
	if _, err := MachineConfig(bad); err == nil || !strings.Contains(err.Error(), `kubelet version "latest"`) {
		t.Errorf("a bad version: %v", err)
	}
}
