package schema

// NodeGroup is a set of machines of one role on one provider in a tenant.
// Its labels name the tenant (LabelTenant) and the role (LabelRole).
type NodeGroup struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   ObjectMeta      `json:"metadata"`
	Spec       NodeGroupSpec   `json:"spec"`
	Status     NodeGroupStatus `json:"status,omitzero"`
	Source     Source          `json:"-"`
}

// Tenant returns the name of the tenant the node group belongs to.
func (g *NodeGroup) Tenant() string { return g.Metadata.Labels[LabelTenant] }

// Role returns the role of the node group's machines: RoleControlPlane or
// RoleWorker.
func (g *NodeGroup) Role() string { return g.Metadata.Labels[LabelRole] }

// NodeGroupSpec is what an operator declares about a node group.
type NodeGroupSpec struct {
	Count         int    `json:"count"`
	ProviderClass string `json:"providerClass"`
	// ProviderConfig is checked by the provider module of ProviderClass, not
	// here. Numbers in it are float64, as encoding/json decodes them.
	ProviderConfig map[string]any `json:"providerConfig,omitempty"`
	// TalosVersion overrides the tenant's Talos version for these machines.
	TalosVersion  string       `json:"talosVersion,omitempty"`
	ConfigPatches []NamedPatch `json:"configPatches,omitempty"`
	// Drain overrides the tenant's drain policy, field by field, for
	// these machines.
	Drain *DrainPolicy `json:"drain,omitempty"`
}

// NodeGroupStatus is what the server observes about a node group.
type NodeGroupStatus struct {
	Machines MachineCounts `json:"machines"`
	Message  string        `json:"message,omitempty"`
	// Conditions holds Ready: every machine the group asks for exists and
	// is in stage ready.
	Conditions Conditions `json:"conditions,omitempty"`
}
