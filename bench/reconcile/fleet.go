// Package reconcile benchmarks the reconcile loop on a fleet of tenants on
// the simulated cloud: the cost of a commit that changes nothing against the
// `tofu plan` pass a CI pipeline would run in every workspace, the wall time
// of one changed tenant against a bare `tofu plan && tofu apply`, and the
// peak memory of the real server process. The benchmarks drive the real
// tofu binary, the real sim provider, a real state backend on loopback and
// real bbolt files.
//
// It holds the fleet the benchmarks run on and nothing the product uses:
// no package of the product may import it.
package reconcile

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Fleet is a manifests repository of Tenants tenants, all on the simulated
// cloud, each with PerTenant machines (default 3): one control plane and
// the rest workers, or three control planes from 5 machines up (8 is 3 +
// 5). Workers overrides the worker count of the named tenants. Each tenant
// lives in its own file, so that a change to one tenant changes one file.
type Fleet struct {
	Tenants   int
	PerTenant int
	// Workers overrides the worker count of the named tenants.
	Workers map[string]int
}

// DefaultPerTenant is the machines of a tenant when PerTenant is 0.
const DefaultPerTenant = 3

// perTenant is the machines each tenant has unless Workers says otherwise.
func (f Fleet) perTenant() int {
	if f.PerTenant > 0 {
		return f.PerTenant
	}
	return DefaultPerTenant
}

// ControlPlanes is the control-plane count of every tenant: 1, or 3 from
// 5 machines per tenant up.
func (f Fleet) ControlPlanes() int {
	if f.perTenant() >= 5 {
		return 3
	}
	return 1
}

// TenantName is the name of the i-th tenant of a fleet.
func TenantName(i int) string { return fmt.Sprintf("t%03d", i) }

// TenantFile is the path, inside the repository, of a tenant's manifests.
func TenantFile(tenant string) string { return path.Join("tenants", tenant+".yaml") }

// WorkersOf returns the worker count the fleet declares for tenant.
func (f Fleet) WorkersOf(tenant string) int {
	if n, ok := f.Workers[tenant]; ok {
		return n
	}
	return max(0, f.perTenant()-f.ControlPlanes())
}

// With returns a copy of f whose tenant has n workers.
func (f Fleet) With(tenant string, n int) Fleet {
	w := make(map[string]int, len(f.Workers)+1)
	for k, v := range f.Workers {
		w[k] = v
	}
	w[tenant] = n
	return Fleet{Tenants: f.Tenants, PerTenant: f.PerTenant, Workers: w}
}

// WithAll returns a copy of f whose first n tenants have delta more
// workers than f gives them.
func (f Fleet) WithAll(n, delta int) Fleet {
	out := f
	for i := range min(n, f.Tenants) {
		name := TenantName(i)
		out = out.With(name, f.WorkersOf(name)+delta)
	}
	return out
}

// Machines is how many machines the fleet declares.
func (f Fleet) Machines() int {
	n := 0
	for i := range f.Tenants {
		n += f.ControlPlanes() + f.WorkersOf(TenantName(i))
	}
	return n
}

// Files returns the repository's files by path.
func (f Fleet) Files() map[string][]byte {
	out := make(map[string][]byte, f.Tenants+1)
	out["README.md"] = []byte(fmt.Sprintf("# Benchmark fleet\n\n%d tenants on the simulated cloud.\n", f.Tenants))
	for i := range f.Tenants {
		name := TenantName(i)
		out[TenantFile(name)] = tenantManifests(i, name, f.ControlPlanes(), f.WorkersOf(name))
	}
	return out
}

// MapFS returns the repository as an in-memory tree for a Snapshot.
func (f Fleet) MapFS() fstest.MapFS {
	m := fstest.MapFS{}
	for p, b := range f.Files() {
		m[p] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	return m
}

// WriteDir writes the repository under dir, rewriting only the files whose
// content differs, so that a watcher sees only real changes.
func (f Fleet) WriteDir(dir string) error {
	for p, b := range f.Files() {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if old, err := os.ReadFile(full); err == nil && string(old) == string(b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("write fleet: %w", err)
		}
		tmp := full + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("write fleet: %w", err)
		}
		if err := os.Rename(tmp, full); err != nil {
			return fmt.Errorf("write fleet: %w", err)
		}
	}
	return nil
}

// tenantManifests is one tenant's Tenant and its two node groups. Each
// tenant gets its own networks so that the manifests differ as real ones
// would.
func tenantManifests(i int, name string, controlPlanes, workers int) []byte {
	return []byte(fmt.Sprintf(`apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: %[1]s
  labels:
    environment: bench
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://%[1]s.bench.internal:6443
  podNetwork:
    - 10.%[2]d.0.0/16
  serviceNetwork:
    - 172.%[3]d.%[4]d.0/24
  plugins:
    cni:
      type: flannel
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: controlplane
  labels:
    rezuscloud.io/tenant: %[1]s
    rezuscloud.io/role: controlplane
spec:
  count: %[6]d
  providerClass: sim
  providerConfig:
    shape: small
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: %[1]s
    rezuscloud.io/role: worker
spec:
  count: %[5]d
  providerClass: sim
  providerConfig:
    shape: medium
`, name, 10+i%200, 16+i/256%16, i%256, workers, controlPlanes))
}

// WriteVarFile writes the values of the sensitive variables of tenant's
// workspace, rendered from the fleet's manifests with the tenant's secrets
// bundle (its secrets and machine configs, which the reconciler hands to
// tofu only while it plans), to dir/vars/TENANT.tfvars.json, where a bare
// tofu run reads them, and returns its path.
func (f Fleet) WriteVarFile(tenant string, bundle []byte, dir string) (string, error) {
	if len(bundle) == 0 {
		return "", fmt.Errorf("no secrets bundle of %s", tenant)
	}
	d, err := schema.Load(f.MapFS(), ".", nil)
	if err != nil {
		return "", err
	}
	for _, td := range d.Tenants {
		if td.Tenant.Metadata.Name != tenant {
			continue
		}
		ws, err := render.Builtin().Render(td, bundle)
		if err != nil {
			return "", err
		}
		vars, err := ws.VarFile()
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, "vars", tenant+".tfvars.json")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		return path, os.WriteFile(path, vars, 0o600)
	}
	return "", fmt.Errorf("no tenant %s in the fleet", tenant)
}
