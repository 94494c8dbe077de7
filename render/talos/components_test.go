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
// image keeps it.
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
		got := map[string]string{ComponentKubelet: cfg.Machine().Kubelet().Image()}
		if cfg.Machine().Type().IsControlPlane() {
			c := cfg.Cluster()
			got[ComponentAPIServer] = c.APIServer().Image()
			got[ComponentControllerManager] = c.ControllerManager().Image()
			got[ComponentScheduler] = c.Scheduler().Image()
		}
		got["kube-proxy"] = cfg.Cluster().Proxy().Image()
		return got
	}
	tag := func(image string) string { return image[strings.LastIndex(image, ":")+1:] }

	cp := baseInput(t, RoleControlPlane)
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
	pinned.Patches = []Patch{{Name: "pin", Patch: "cluster:\n  apiServer:\n    image: registry.example/kube-apiserver:v1.35.0-custom\n"}}
	if got := images(t, pinned); got[ComponentAPIServer] != "registry.example/kube-apiserver:v1.35.0-custom" {
		t.Errorf("a pinned image: %s", got[ComponentAPIServer])
	}

	bad := cp
	bad.Components = ComponentVersions{Kubelet: "latest"}
	if _, err := MachineConfig(bad); err == nil || !strings.Contains(err.Error(), `kubelet version "latest"`) {
		t.Errorf("a bad version: %v", err)
	}
}
