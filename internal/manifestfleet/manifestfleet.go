// Package manifestfleet writes the manifests of the large fleets that the
// benchmarks load: each tenant is ten manifest files (a Tenant, two
// NodeGroups and seven ConfigPatches) in a directory of its own, so that
// 2,000 tenants are 20,000 manifests. It serves benchmarks and tests only:
// nothing the product runs imports it.
package manifestfleet

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
)

// Name is the name of the i-th tenant of a fleet.
func Name(i int) string { return fmt.Sprintf("t%04d", i) }

// Files returns the ten manifest files of tenant i, whose worker group
// has workers machines, by their slash-separated path in the repository
// (tenants/NAME/FILE).
func Files(i, workers int) map[string]string {
	name := Name(i)
	dir := path.Join("tenants", name)
	files := map[string]string{
		path.Join(dir, "tenant.yaml"): fmt.Sprintf(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: %[1]s
  labels: {team: team-%[2]d}
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://%[1]s.example.internal:6443
  podNetwork: [10.244.0.0/16]
  serviceNetwork: [10.96.0.0/12]
  plugins:
    cni: {type: flannel}
`, name, i%7),
	}
	for _, g := range []struct{ name, role string }{{"controlplane", "controlplane"}, {"workers", "worker"}} {
		count := 1
		if g.role == "worker" {
			count = workers
		}
		files[path.Join(dir, "ng-"+g.name+".yaml")] = fmt.Sprintf(`apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: %s
  labels:
    rezuscloud.io/tenant: %s
    rezuscloud.io/role: %s
spec:
  count: %d
  providerClass: sim
  providerConfig:
    shape: small
`, g.name, name, g.role, count)
	}
	for p := range 7 {
		files[path.Join(dir, fmt.Sprintf("patch-%d.yaml", p))] = fmt.Sprintf(`apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: patch-%d
  labels:
    rezuscloud.io/tenant: %s
spec:
  patch: |
    machine:
      sysctls:
        net.core.somaxconn: "%d"
`, p, name, 1024+p)
	}
	return files
}

// WriteTenant writes the files of tenant i (see Files) under dir.
func WriteTenant(dir string, i, workers int) error {
	for name, content := range Files(i, workers) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
