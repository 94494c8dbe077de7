// Package manifestfleet generates the manifests of fleets of tenants for
// benchmarks and tests: every tenant a Tenant, two NodeGroups (control
// planes and workers) and as many ConfigPatches as asked, the same input
// giving the same bytes. Options say the fleet's size and shape (machines,
// provider, patches, how a tenant's documents are spread over files, how
// tenants are named); Options.Edit changes single tenants.
//
// It writes YAML text and imports nothing of the project, so that every
// package's tests can use it, schema's own included. It serves benchmarks
// and tests only: nothing the product runs imports it.
package manifestfleet

import (
	"fmt"
	"strconv"
)

// Options describe a fleet. The fields without a default are used as
// they are: a fleet of Options{} has no tenants, and Workers 0 is a
// worker group of no machines.
type Options struct {
	// Tenants is how many tenants the fleet has, numbered from 0.
	Tenants int
	// Digits is the least number of digits of a tenant's number in its
	// name, which is t and the number: t0042 with 4, the default, t042
	// with 3.
	Digits int
	// Dir is the directory of the repository that holds the tenants:
	// "tenants" by default, "." for the repository's root.
	Dir string
	// Layout is how each tenant's documents are spread over files; a
	// file per document by default.
	Layout Layout
	// ControlPlanes and Workers are the machines of each tenant's node
	// groups "controlplane" and "workers".
	ControlPlanes, Workers int
	// Provider is both node groups' providerClass, "sim" by default, and
	// ProviderConfig their spec.providerConfig as YAML, "shape: small" by
	// default on sim and none on another provider.
	Provider, ProviderConfig string
	// Patches is how many ConfigPatches each tenant has: patch-0, patch-1,
	// … (see PatchText).
	Patches int
	// SchemaComment starts every Tenant document with the comment that
	// points editors at the Tenant's JSON Schema, as users' files do.
	SchemaComment bool
	// ServiceAccountKey is every Tenant's spec.serviceAccountKey; empty,
	// the field is left out (an RSA key, about a second of CPU each).
	ServiceAccountKey string
	// Edit, when set, changes each tenant after Options made it and
	// before it is written.
	Edit func(*Tenant)
	// Extra holds other files of the repository by path, a README for
	// instance: Files and WriteDir write them as they are.
	Extra map[string][]byte
}

// Tenant is one tenant of a fleet and its documents, as Options make it
// and Options.Edit may change it. Empty strings, lists and maps are left
// out of the YAML; a node group's name, role and count are always in it.
type Tenant struct {
	// Index is the tenant's number in the fleet, from 0. Name names its
	// files as well as the tenant.
	Index int
	Name  string
	// Labels are the Tenant's metadata.labels.
	Labels                          map[string]string
	KubernetesVersion, TalosVersion string
	// Endpoint is spec.controlPlaneEndpoint.
	Endpoint                   string
	PodNetwork, ServiceNetwork []string
	// CNI is spec.plugins.cni.type.
	CNI string
	// ServiceAccountKey is spec.serviceAccountKey.
	ServiceAccountKey string
	// Patches are the Tenant's own spec.configPatches.
	Patches []Patch
	// Groups are the tenant's NodeGroups: Groups[0] its control planes,
	// Groups[1] its workers.
	Groups []Group
	// ConfigPatches are the tenant's ConfigPatch documents.
	ConfigPatches []Patch
}

// Group is a NodeGroup of a tenant.
type Group struct {
	Name, Role string
	Count      int
	// ProviderClass and ProviderConfig (YAML) are the group's provider.
	ProviderClass, ProviderConfig string
	// Patches are the group's own spec.configPatches.
	Patches []Patch
}

// Patch is a Talos config patch: a ConfigPatch document, or an item of a
// Tenant's or NodeGroup's spec.configPatches.
type Patch struct {
	Name string
	// TargetRole is a ConfigPatch's spec.targetRole; inline patches have
	// none.
	TargetRole string
	// Text is the patch, YAML.
	Text string
}

// TenFiles is the fleet of the load benchmarks: tenants of ten manifest
// files each (a Tenant, a control plane and a worker in two NodeGroups,
// seven ConfigPatches), in tenants/NAME/, so that 2,000 tenants are
// 20,000 manifests.
func TenFiles(tenants int) Options {
	return Options{Tenants: tenants, ControlPlanes: 1, Workers: 1, Patches: 7}
}

// Name is the name of tenant i.
func (o Options) Name(i int) string {
	digits := o.Digits
	if digits <= 0 {
		digits = 4
	}
	return fmt.Sprintf("t%0*d", digits, i)
}

// PatchText is the text of a tenant's p-th ConfigPatch: every tenant has
// the same texts, as fleets share theirs.
func PatchText(p int) string {
	return "machine:\n  sysctls:\n    net.core.somaxconn: \"" + strconv.Itoa(1024+p) + "\"\n"
}

// Tenant returns tenant i as the fleet writes it, after Edit.
func (o Options) Tenant(i int) Tenant {
	name := o.Name(i)
	provider, config := o.Provider, o.ProviderConfig
	if provider == "" {
		provider = "sim"
	}
	if provider == "sim" && config == "" {
		config = "shape: small"
	}
	t := Tenant{
		Index:             i,
		Name:              name,
		Labels:            map[string]string{"team": fmt.Sprintf("team-%d", i%7)},
		KubernetesVersion: "1.34.1",
		TalosVersion:      "1.12.6",
		Endpoint:          "https://" + name + ".example.internal:6443",
		ServiceAccountKey: o.ServiceAccountKey,
		PodNetwork:        []string{"10.244.0.0/16"},
		ServiceNetwork:    []string{"10.96.0.0/12"},
		CNI:               "flannel",
		Groups: []Group{
			{Name: "controlplane", Role: "controlplane", Count: o.ControlPlanes, ProviderClass: provider, ProviderConfig: config},
			{Name: "workers", Role: "worker", Count: o.Workers, ProviderClass: provider, ProviderConfig: config},
		},
	}
	for p := range o.Patches {
		t.ConfigPatches = append(t.ConfigPatches, Patch{Name: fmt.Sprintf("patch-%d", p), Text: PatchText(p)})
	}
	if o.Edit != nil {
		o.Edit(&t)
	}
	return t
}

// Machines is how many machines the fleet declares.
func (o Options) Machines() int {
	n := 0
	for i := range o.Tenants {
		for _, g := range o.Tenant(i).Groups {
			n += g.Count
		}
	}
	return n
}
