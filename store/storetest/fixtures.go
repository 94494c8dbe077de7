package storetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Objects of the API kinds, as the tests of the store and of the API store
// and serve them. n numbers an object: it picks its uid (UIDBase and n),
// its createdAt and updatedAt (SeedTime plus n minutes) and, for a
// machine, its address.

// SeedTime is the clock of the fixtures.
var SeedTime = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// UIDBase starts every fixture's uid.
const UIDBase = "6f1c0c1e-0000-4000-8000-"

// Labels the reconciler puts on machines besides tenant and role.
const (
	LabelNodeGroup = "rezuscloud.io/node-group"
	LabelProvider  = "rezuscloud.io/provider"
)

// Meta returns the metadata of fixture n.
func Meta(name string, n int, labels map[string]string) schema.ObjectMeta {
	return schema.ObjectMeta{
		Name:      name,
		UID:       fmt.Sprintf("%s%012d", UIDBase, n),
		CreatedAt: SeedTime.Add(time.Duration(n) * time.Minute),
		UpdatedAt: SeedTime.Add(time.Duration(n) * time.Minute),
		Labels:    labels,
	}
}

// Tenant returns an active tenant labelled env=env.
func Tenant(name, env string, n int) *schema.Tenant {
	return &schema.Tenant{
		APIVersion: schema.APIVersion, Kind: schema.KindTenant,
		Metadata: Meta(name, n, map[string]string{"env": env}),
		Spec: schema.TenantSpec{
			KubernetesVersion: "1.34.1", TalosVersion: "1.12.6",
			ControlPlaneEndpoint: "https://" + name + ".example:6443",
			PodNetwork:           []string{"10.244.0.0/16"},
		},
		Status: schema.TenantStatus{Phase: schema.TenantActive, Available: true,
			Machines: schema.MachineCounts{Desired: 3, Total: 3}},
	}
}

// NodeGroup returns a sim node group of tenant.
func NodeGroup(tenant, name, role string, count, n int) *schema.NodeGroup {
	return &schema.NodeGroup{
		APIVersion: schema.APIVersion, Kind: schema.KindNodeGroup,
		Metadata: Meta(name, n, map[string]string{schema.LabelTenant: tenant, schema.LabelRole: role}),
		Spec: schema.NodeGroupSpec{Count: count, ProviderClass: schema.ProviderSim,
			ProviderConfig: map[string]any{"shape": "small"}},
	}
}

// Patch returns a config patch of tenant.
func Patch(tenant, name string, n int) *schema.ConfigPatch {
	return &schema.ConfigPatch{
		APIVersion: schema.APIVersion, Kind: schema.KindConfigPatch,
		Metadata: Meta(name, n, map[string]string{schema.LabelTenant: tenant}),
		Spec:     schema.ConfigPatchSpec{Patch: "machine:\n  time:\n    servers: [time.cloudflare.com]\n"},
	}
}

// Machine returns a ready sim machine of tenant's node group ng.
func Machine(id, tenant, ng, role, shape string, n int) *schema.Machine {
	return &schema.Machine{
		APIVersion: schema.APIVersion, Kind: schema.KindMachine,
		Metadata: Meta(id, n, map[string]string{
			schema.LabelTenant: tenant, schema.LabelRole: role,
			LabelNodeGroup: ng, LabelProvider: schema.ProviderSim,
			"shape": shape,
		}),
		Spec: schema.MachineSpec{ManagementAddress: "10.0.0." + fmt.Sprint(n), ProviderID: id,
			ProviderClass: schema.ProviderSim, Shape: shape, Hostname: id, Role: role,
			Tenant: tenant, NodeGroup: ng, TFAddress: "rezussim_machine." + ng + "[0]"},
		Status: schema.MachineStatus{Stage: schema.StageReady, Ready: true},
	}
}

// Commit returns the Commit of revision rev, created at created, that
// applied tenant alpha.
func Commit(rev string, created time.Time, phase schema.CommitPhase) *schema.Commit {
	return &schema.Commit{
		APIVersion: schema.APIVersion, Kind: schema.KindCommit,
		Metadata: schema.ObjectMeta{Name: strings.ReplaceAll(rev, ":", "-"), UID: UIDBase + "c0000000000" + rev[len(rev)-1:],
			CreatedAt: created, UpdatedAt: created},
		Spec: schema.CommitSpec{SHA: rev, Ref: "refs/heads/main", Author: "Ana <ana@example.com>", Message: "scale workers"},
		Status: schema.CommitStatus{Phase: phase, Tenants: []schema.TenantResult{
			{Tenant: "alpha", Phase: phase, Plan: schema.PlanSummary{Add: 1}},
		}},
	}
}

// Provider returns the built-in sim provider.
func Provider(n int) *schema.Provider {
	return &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider,
		Metadata: Meta("sim", n, nil),
		Spec:     schema.ProviderSpec{Class: "sim", Source: "registry.opentofu.org/rezuscloud/rezussim", Builtin: true}}
}
