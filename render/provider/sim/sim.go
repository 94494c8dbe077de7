// Package sim is the provider module of the simulated cloud (providerClass
// "sim"), whose machines the rezussim provider creates. It must not import
// render or another module.
package sim

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Source is the provider source address of the simulated cloud.
const Source = "rezuscloud.io/rezuscloud/rezussim"

// shapes are the machine sizes the simulated cloud offers.
var shapes = []string{"small", "medium", "large"}

// Module is the provider module of the simulated cloud. Its providerConfig
// takes:
//
//	shape: small | medium | large   (default small)
//	image: a free-form image name   (default "talos-<talosVersion>")
//	kubernetesAPI: true | false     (default false)
//
// With kubernetesAPI the simulated cloud runs a real Kubernetes control
// plane for the tenant at its controlPlaneEndpoint, which must then be a
// loopback address (https://127.x.y.z:6443), once the tenant is
// bootstrapped; it changes in place.
//
// A machine keeps the user data (its Talos config) and the default image
// it was created with: their resources ignore later changes, which the
// Talos plane applies in place. An image given in providerConfig is the
// machine's own: a change of it replaces the machines.
type Module struct{}

var _ module.Module = Module{}

// Name implements module.Module.
func (Module) Name() string { return schema.ProviderSim }

// Provider implements module.Module.
func (Module) Provider() module.Provider {
	return module.Provider{LocalName: "rezussim", Source: Source}
}

// ProviderConfig implements module.Module. The machines' directory comes
// from the REZUSSIM_DIR environment of each run, so the block is empty.
func (Module) ProviderConfig(*schema.NodeGroup) module.ProviderConfig {
	return module.ProviderConfig{}
}

// fields is the providerConfig schema.
var fields = []module.Field{
	{Name: "shape", Kind: module.String, Check: func(v any) string {
		if s := v.(string); !slices.Contains(shapes, s) {
			return fmt.Sprintf("%q is not offered: use one of %s", s, strings.Join(shapes, ", "))
		}
		return ""
	}},
	{Name: "image", Kind: module.String, Check: func(v any) string {
		if v.(string) == "" {
			return "must not be empty"
		}
		return ""
	}},
	{Name: "kubernetesAPI", Kind: module.Bool},
}

// Validate implements module.Module.
func (Module) Validate(ng *schema.NodeGroup) []schema.Problem {
	c := module.Checker{Class: schema.ProviderSim, NG: ng}
	c.Check(fields)
	return c.Problems
}

// CheckWithTenant implements module.TenantChecker: a node group with
// kubernetesAPI needs its tenant's controlPlaneEndpoint at a loopback IPv4
// address, the only place the simulated cloud serves a Kubernetes API.
func (Module) CheckWithTenant(t *schema.Tenant, ng *schema.NodeGroup) []schema.Problem {
	if on, _ := ng.Spec.ProviderConfig["kubernetesAPI"].(bool); !on {
		return nil
	}
	ep := t.Spec.ControlPlaneEndpoint
	if u, err := url.Parse(ep); err == nil {
		if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.Is4() && a.IsLoopback() {
			return nil
		}
	}
	c := module.Checker{Class: schema.ProviderSim, NG: ng}
	c.Add([]string{"kubernetesAPI"}, "needs a controlPlaneEndpoint at a loopback IPv4 address, the only place the simulated cloud serves a Kubernetes API: tenant %s's is %s (%s); use one such as https://127.250.0.1:6443",
		t.Metadata.Name, ep, t.Source.Position("/spec/controlPlaneEndpoint"))
	return c.Problems
}

// Resources implements module.Module: one rezussim_machine resource with a
// count.
func (Module) Resources(m module.MachineInput) []module.Resource {
	ng := m.NodeGroup
	shape, _ := ng.Spec.ProviderConfig["shape"].(string)
	if shape == "" {
		shape = "small"
	}
	image, _ := ng.Spec.ProviderConfig["image"].(string)
	// A machine takes its config and its image when it is created; later
	// changes reach it in place through the Talos plane (ApplyConfiguration,
	// Upgrade), never by a new machine. An image the node group names
	// itself is a field of the machine: changing it replaces the machines.
	ignore := []string{"user_data"}
	if image == "" {
		image = "talos-" + strings.TrimPrefix(m.TalosVersion, "v")
		ignore = append(ignore, "image")
	}
	body := map[string]any{
		"count":      ng.Spec.Count,
		"name":       fmt.Sprintf("%s-%s-${count.index}", m.Tenant, ng.Metadata.Name),
		"tenant":     m.Tenant,
		"node_group": ng.Metadata.Name,
		"role":       m.Role,
		"shape":      shape,
		"image":      image,
	}
	if m.UserData != "" {
		body["user_data"] = m.UserData
	}
	if on, _ := ng.Spec.ProviderConfig["kubernetesAPI"].(bool); on {
		body["kubernetes_api"] = true
	}
	body["lifecycle"] = map[string]any{"ignore_changes": ignore}
	return []module.Resource{{Type: "rezussim_machine", Name: m.ResourceName, Body: body}}
}

// Mappings implements module.Module.
func (Module) Mappings() []module.Mapping {
	return []module.Mapping{{
		TFType: "rezussim_machine",
		Kind:   schema.KindMachine,
		Extract: func(a map[string]any) module.MachineFacts {
			return module.MachineFacts{
				ProviderID: module.Str(a["id"]),
				Address:    module.Str(a["address"]),
				Hostname:   module.Str(a["hostname"]),
				Shape:      module.Str(a["shape"]),
				Image:      module.Str(a["image"]),
				Tenant:     module.Str(a["tenant"]),
				NodeGroup:  module.Str(a["node_group"]),
				Role:       module.Str(a["role"]),
				ConfigHash: module.Str(a["user_data_hash"]),
			}
		},
	}}
}
