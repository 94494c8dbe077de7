package render

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// SimSource is the provider source address of the simulated cloud.
const SimSource = "rezuscloud.io/rezuscloud/rezussim"

// simShapes are the machine sizes the simulated cloud offers.
var simShapes = []string{"small", "medium", "large"}

// Sim is the provider module of the simulated cloud (providerClass "sim").
// Its providerConfig takes:
//
//	shape: small | medium | large   (default small)
//	image: a free-form image name   (default "talos-<talosVersion>")
//
// A machine keeps the user data (its Talos config) and the default image
// it was created with: their resources ignore later changes, which the
// Talos plane applies in place. An image given in providerConfig is the
// machine's own: a change of it replaces the machines.
type Sim struct{}

var _ Module = Sim{}

// Name implements Module.
func (Sim) Name() string { return schema.ProviderSim }

// Provider implements Module. The machines' directory comes from the
// REZUSSIM_DIR environment of each run, so it is not rendered.
func (Sim) Provider() Provider {
	return Provider{LocalName: "rezussim", Source: SimSource}
}

// Validate implements Module.
func (Sim) Validate(ng *schema.NodeGroup) []schema.Problem {
	var probs []schema.Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, schema.Problem{
			File: ng.Source.File, Line: ng.Source.LineOf(path), Column: 1, Path: path,
			Message: fmt.Sprintf(format, args...),
		})
	}
	keys := make([]string, 0, len(ng.Spec.ProviderConfig))
	for k := range ng.Spec.ProviderConfig {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := ng.Spec.ProviderConfig[k]
		path := schema.JSONPointer("spec", "providerConfig", k)
		switch k {
		case "shape":
			s, ok := v.(string)
			if !ok {
				add(path, "sim providerConfig.shape must be a string, one of %s", strings.Join(simShapes, ", "))
			} else if !slices.Contains(simShapes, s) {
				add(path, "sim providerConfig.shape %q is not offered: use one of %s", s, strings.Join(simShapes, ", "))
			}
		case "image":
			if s, ok := v.(string); !ok || s == "" {
				add(path, "sim providerConfig.image must be a non-empty string")
			}
		default:
			add(path, "sim providerConfig has no field %q (known: image, shape)", k)
		}
	}
	return probs
}

// Resources implements Module: one rezussim_machine resource with a count.
func (Sim) Resources(m MachineInput) []Resource {
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
	body["lifecycle"] = map[string]any{"ignore_changes": ignore}
	return []Resource{{Type: "rezussim_machine", Name: m.ResourceName, Body: body}}
}

// Mappings implements Module.
func (Sim) Mappings() []Mapping {
	return []Mapping{{
		TFType: "rezussim_machine",
		Kind:   schema.KindMachine,
		Extract: func(a map[string]any) MachineFacts {
			return MachineFacts{
				ProviderID: str(a["id"]),
				Address:    str(a["address"]),
				Hostname:   str(a["hostname"]),
				Shape:      str(a["shape"]),
				Image:      str(a["image"]),
				Tenant:     str(a["tenant"]),
				NodeGroup:  str(a["node_group"]),
				Role:       str(a["role"]),
				ConfigHash: str(a["user_data_hash"]),
			}
		},
	}}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
