package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// appliedTenant rebuilds a tenant's desired state as last applied, from the
// store's records, together with its secrets bundle.
func (r *Reconciler) appliedTenant(ctx context.Context, tenant string) (*schema.TenantDesired, []byte, error) {
	td := &schema.TenantDesired{}
	err := r.store.View(func(tx store.Tx) error {
		t, err := getJSON[schema.Tenant](tx, schema.KindTenant, tenant)
		if err != nil {
			return err
		}
		td.Tenant = t
		err = tx.TenantObjects(tenant, schema.KindNodeGroup, func(res store.Resource) error {
			ng := new(schema.NodeGroup)
			td.NodeGroups = append(td.NodeGroups, ng)
			return json.Unmarshal(res.Object, ng)
		})
		if err != nil {
			return err
		}
		return tx.TenantObjects(tenant, schema.KindConfigPatch, func(res store.Resource) error {
			cp := new(schema.ConfigPatch)
			td.Patches = append(td.Patches, cp)
			return json.Unmarshal(res.Object, cp)
		})
	})
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(td.NodeGroups, func(i, j int) bool { return td.NodeGroups[i].Metadata.Name < td.NodeGroups[j].Metadata.Name })
	sort.Slice(td.Patches, func(i, j int) bool { return td.Patches[i].Metadata.Name < td.Patches[j].Metadata.Name })
	prev, err := r.appliedRecord(tenant)
	if err != nil {
		return nil, nil, err
	}
	if prev == nil {
		return nil, nil, fmt.Errorf("tenant %s has not been applied yet: %w", tenant, store.ErrNotFound)
	}
	dir, err := r.workDir(tenant)
	if err != nil {
		return nil, nil, err
	}
	creds, revoke := r.creds(tenant)
	defer revoke()
	bundle, fresh, err := r.secretsFor(ctx, td, dir, prev.InitInputs, creds)
	if err != nil {
		return nil, nil, err
	}
	if fresh {
		return nil, nil, fmt.Errorf("tenant %s has no secrets in its state: %w", tenant, store.ErrNotFound)
	}
	return td, bundle, nil
}

// Kubeconfig implements backend.TenantSecrets: an admin kubeconfig whose
// client certificate the tenant's Kubernetes CA signs, valid for
// Options.KubeconfigValidity.
func (r *Reconciler) Kubeconfig(ctx context.Context, tenant string) ([]byte, error) {
	td, bundle, err := r.appliedTenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return talos.Kubeconfig(tenant, td.Tenant.Spec.ControlPlaneEndpoint, bundle, r.opts.KubeconfigValidity, r.opts.Now())
}

// Talosconfig implements backend.TenantSecrets: a talosconfig for the
// addresses of the tenant's control-plane machines.
func (r *Reconciler) Talosconfig(ctx context.Context, tenant string) ([]byte, error) {
	_, bundle, err := r.appliedTenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	machines, err := r.storedMachines(tenant)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for _, m := range machines {
		if m.Spec.Role == schema.RoleControlPlane && m.Spec.ManagementAddress != "" {
			endpoints = append(endpoints, m.Spec.ManagementAddress)
		}
	}
	sort.Strings(endpoints)
	return talos.Talosconfig(tenant, endpoints, bundle, r.opts.Now())
}

// MachineConfig implements backend.TenantSecrets: the config of the
// machine's node group, rendered from the manifests last applied as the
// store keeps them. SOPS-encrypted values never leave the server, so the
// patches that held some are left out, and a comment at the top names
// them.
func (r *Reconciler) MachineConfig(ctx context.Context, tenant, machine string) ([]byte, error) {
	var m *schema.Machine
	err := r.store.View(func(tx store.Tx) error {
		var err error
		m, err = getJSON[schema.Machine](tx, schema.KindMachine, machine)
		return err
	})
	if err != nil {
		return nil, err
	}
	if owner := schema.TenantOf(schema.KindMachine, &m.Metadata); owner != tenant {
		return nil, fmt.Errorf("machine %s belongs to tenant %s, not %s: %w", machine, owner, tenant, store.ErrNotFound)
	}
	td, bundle, err := r.appliedTenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, ng := range td.NodeGroups {
		if ng.Metadata.Name == m.Metadata.Labels[schema.LabelNodeGroup] {
			in := talos.InputFor(td, ng, bundle)
			var left []string
			in.Patches = slices.DeleteFunc(in.Patches, func(p talos.Patch) bool {
				if strings.Contains(p.Patch, schema.EncryptedValue) {
					left = append(left, p.Name)
					return true
				}
				return false
			})
			cfg, err := talos.MachineConfig(in)
			if err != nil || len(left) == 0 {
				return cfg, err
			}
			note := "# Left out: the patches " + strings.Join(left, ", ") + ", which hold SOPS-encrypted values.\n"
			return append([]byte(note), cfg...), nil
		}
	}
	return nil, fmt.Errorf("node group %s of machine %s: %w", m.Metadata.Labels[schema.LabelNodeGroup], machine, store.ErrNotFound)
}

func defaultValidity(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultKubeconfigValidity
	}
	return d
}
