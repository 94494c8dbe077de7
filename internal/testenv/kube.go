package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
)

// KubeBin returns the directory of the real Kubernetes control plane's
// binaries (etcd, kube-apiserver, kube-controller-manager, kubectl):
// $REZUSCLOUD_KUBE_BIN, or what scripts/kube.sh caches, building it the
// first time (15 to 25 minutes on 2 cores).
func KubeBin(t TB) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(Root(), "scripts", "kube.sh")).Output()
	if err != nil {
		t.Fatalf("no Kubernetes control plane: set REZUSCLOUD_KUBE_BIN or run `make kube` (%v)", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		t.Fatalf("no Kubernetes control plane: scripts/kube.sh printed nothing")
	}
	return lines[len(lines)-1]
}
