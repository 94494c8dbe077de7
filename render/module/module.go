// Package module declares what a provider module is: the part of RezusCloud
// that knows one providerClass, checks its providerConfig, renders its node
// groups into TF resources and maps its TF types back to resource kinds. The
// modules themselves live under render/provider/<name>; package render
// assembles them into workspaces.
//
// It holds the interface, the shared types and the providerConfig checker
// that reports file:line. It must not import render, the modules, reconciler
// or backend.
package module

import (
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Module is what a providerClass needs to take part: it checks the node
// group's providerConfig, says which TF provider it needs and how each node
// group configures it, renders a node group into TF resources, and declares
// how its TF types become resource kinds when state is projected.
type Module interface {
	// Name is the providerClass the module serves, such as "sim".
	Name() string
	// Validate checks a node group's providerConfig. Problems name the
	// manifest's file and the line of the offending key.
	Validate(ng *schema.NodeGroup) []schema.Problem
	// Provider names the TF provider the module's resources need.
	Provider() Provider
	// ProviderConfig is the provider configuration a node group's
	// resources use. Node groups that name the same alias share one
	// configuration and must agree on it.
	ProviderConfig(ng *schema.NodeGroup) ProviderConfig
	// Resources renders one node group. MachineInput gives what every
	// machine of the group shares: the names and the Talos config it boots
	// with.
	Resources(m MachineInput) []Resource
	// Mappings declare which TF resource types are machines (or other
	// kinds) and how to read their attributes.
	Mappings() []Mapping
}

// TenantChecker is implemented by a module some of whose providerConfig
// holds only with settings of the tenant: it checks a node group beside
// its tenant, after Validate. Problems name the node group's file and line.
type TenantChecker interface {
	CheckWithTenant(t *schema.Tenant, ng *schema.NodeGroup) []schema.Problem
}

// ConfigChecker is implemented by modules whose cloud limits the machine
// config it can deliver at boot (the user data). Validation and rendering
// call it with the config a node group's machines boot with.
type ConfigChecker interface {
	CheckConfig(ng *schema.NodeGroup, config []byte) []schema.Problem
}

// Installer is implemented by modules whose machines boot an installer
// (ISO or PXE) and install Talos to a disk, as bare metal does: their
// configs are generated and validated in the Talos validator's metal mode,
// with the install disk InstallDisk names for the node group.
type Installer interface {
	InstallDisk(ng *schema.NodeGroup) string
}

// Provider is a TF provider requirement.
type Provider struct {
	LocalName string // the name in required_providers, e.g. "rezussim"
	Source    string // the provider source address
	Version   string // a version constraint, or "" for any
	// Builtin is set for tofu's built-in provider (terraform_data): the
	// workspace then declares no requirement and no provider block for it.
	Builtin bool
}

// ProviderConfig is one provider block. Alias "" is the default
// configuration; resources of an aliased one name it in their "provider"
// argument (see Ref).
type ProviderConfig struct {
	Alias string
	Body  map[string]any // without "alias"; nil for an empty block
}

// Ref is the value of a resource's "provider" argument that selects this
// configuration of the provider localName, or "" for the default one.
func (c ProviderConfig) Ref(localName string) string {
	if c.Alias == "" {
		return ""
	}
	return localName + "." + c.Alias
}

// MachineInput is what a module gets to render one node group.
type MachineInput struct {
	Tenant    string
	NodeGroup *schema.NodeGroup
	Role      string
	// TalosVersion is the node group's talosVersion, else the tenant's.
	TalosVersion string
	// ResourceName is the TF resource name to use, unique in the workspace;
	// a module naming several resources derives their names from it.
	ResourceName string
	// UserData is a TF expression, "${var.…}", whose value is the machine
	// config every machine of the group boots with; "" when there is none.
	// The config itself is a sensitive variable's value and never part of
	// the rendered files: modules place the expression as given.
	UserData string
	// UserDataBase64 is the same config base64-encoded, again as an
	// expression ("${base64encode(var.…)}"), for clouds that want it
	// encoded by the caller.
	UserDataBase64 string
	// ConfigHash is the hex SHA-256 of the config's bytes.
	ConfigHash string
}

// Resource is one TF resource block, or a data source when Data is set.
type Resource struct {
	Data bool
	Type string
	Name string
	Body map[string]any
}

// Mapping says that resources of TFType are objects of Kind, and how to
// read one from its state attributes.
type Mapping struct {
	TFType  string                                  `json:"tfType"`
	Kind    string                                  `json:"kind"`
	Extract func(attrs map[string]any) MachineFacts `json:"-"`
}

// MachineFacts are the attributes of one machine in TF state that the
// projection needs.
type MachineFacts struct {
	ProviderID string
	Address    string
	Hostname   string
	Shape      string
	Image      string
	Tenant     string
	NodeGroup  string
	Role       string
	// Zone is the availability zone or domain the machine runs in, when
	// the cloud has them.
	Zone string
	// PublicAddress is the machine's public IP, when it has one apart
	// from Address.
	PublicAddress string
	// State is the cloud's own word for the instance's state (such as
	// RUNNING), when the provider records one.
	State string
	// ConfigHash is the sha256 of the machine config the provider records
	// for the machine.
	ConfigHash string
	// Index is the machine's place in its node group when the TF resource
	// is keyed by name (for_each), as bare-metal machines are; nil means
	// the resource's count index.
	Index *int
}

// Str returns v when it is a string, else "".
func Str(v any) string {
	s, _ := v.(string)
	return s
}

// Literal makes s a literal in a .tf.json string, where "${" and "%{" would
// otherwise start template sequences. Every string a manifest gives that a
// module places in a rendered value goes through it.
func Literal(s string) string {
	s = strings.ReplaceAll(s, "${", "$${")
	return strings.ReplaceAll(s, "%{", "%%{")
}
