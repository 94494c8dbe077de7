package schema

// Provider describes a built-in provider module: the provider class it
// serves, the TF provider it drives and how that provider's resource types map
// to RezusCloud kinds. The API serves it; it cannot be declared in git.
type Provider struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   ObjectMeta     `json:"metadata"`
	Spec       ProviderSpec   `json:"spec"`
	Status     ProviderStatus `json:"status,omitzero"`
}

// ProviderSpec describes a provider module.
type ProviderSpec struct {
	// Class is the providerClass that node groups name, e.g. "sim".
	Class string `json:"class"`
	// Source and Version are the TF provider's address and version
	// constraint, e.g. "registry.opentofu.org/rezuscloud/rezussim".
	Source  string `json:"source"`
	Version string `json:"version,omitempty"`
	// Builtin is true for modules compiled into the server.
	Builtin bool `json:"builtin"`
	// Mappings say which RezusCloud kind each TF resource type projects to.
	Mappings []TypeMapping `json:"mappings"`
}

// TypeMapping maps one TF resource type to a RezusCloud kind.
type TypeMapping struct {
	TFType string `json:"tfType"`
	Kind   string `json:"kind"`
}

// ProviderStatus is what the server observes about a provider module.
type ProviderStatus struct {
	// Available is true when the TF provider can be installed (found in the
	// mirror or a reachable registry).
	Available bool   `json:"available"`
	Message   string `json:"message,omitempty"`
}
