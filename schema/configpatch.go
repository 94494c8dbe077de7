package schema

// ConfigPatch is a Talos machine config overlay for a tenant's machines. Its
// label LabelTenant names the tenant.
type ConfigPatch struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   ObjectMeta        `json:"metadata"`
	Spec       ConfigPatchSpec   `json:"spec"`
	Status     ConfigPatchStatus `json:"status,omitzero"`
	Source     Source            `json:"-"`
}

// Tenant returns the name of the tenant the patch belongs to.
func (p *ConfigPatch) Tenant() string { return p.Metadata.Labels[LabelTenant] }

// ConfigPatchSpec is what an operator declares about a patch.
type ConfigPatchSpec struct {
	// TargetRole limits the patch to machines of one role; empty means all.
	TargetRole string `json:"targetRole,omitempty"`
	// Patch is YAML text, as in NamedPatch.
	Patch string `json:"patch"`
}

// ConfigPatchStatus is what the server observes about a patch.
type ConfigPatchStatus struct {
	// Machines counts the machines whose config carries the patch.
	Machines int `json:"machines"`
}
