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
	"path/filepath"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
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
func TenantName(i int) string { return Fleet{}.manifests().Name(i) }

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
func (f Fleet) Machines() int { return f.manifests().Machines() }

// MapFS returns the repository as an in-memory tree for a Snapshot.
func (f Fleet) MapFS() fstest.MapFS { return f.manifests().MapFS() }

// WriteDir writes the repository under dir, rewriting only the files whose
// content differs, so that a watcher sees only real changes.
func (f Fleet) WriteDir(dir string) error { return f.manifests().WriteDir(dir) }

// manifests is the fleet's repository: a README and each tenant's Tenant
// and two node groups in one file, tenants/NAME.yaml. Each tenant gets its
// own networks so that the manifests differ as real ones would.
func (f Fleet) manifests() manifestfleet.Options {
	return manifestfleet.Options{Tenants: f.Tenants, Digits: 3, Layout: manifestfleet.FilePerTenant, ControlPlanes: f.ControlPlanes(),
		Extra: map[string][]byte{"README.md": fmt.Appendf(nil, "# Benchmark fleet\n\n%d tenants on the simulated cloud.\n", f.Tenants)},
		Edit: func(t *manifestfleet.Tenant) {
			i := t.Index
			t.Labels = map[string]string{"environment": "bench"}
			t.Endpoint = "https://" + t.Name + ".bench.internal:6443"
			t.PodNetwork = []string{fmt.Sprintf("10.%d.0.0/16", 10+i%200)}
			t.ServiceNetwork = []string{fmt.Sprintf("172.%d.%d.0/24", 16+i/256%16, i%256)}
			t.Groups[1].Count = f.WorkersOf(t.Name)
			t.Groups[1].ProviderConfig = "shape: medium"
		}}
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
