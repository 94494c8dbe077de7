package render

import (
	"fmt"
	"sort"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Module is what a providerClass needs to take part: it checks the node
// group's providerConfig, says which TF provider it needs, renders a node
// group into TF resources, and declares how its TF types become resource
// kinds when state is projected.
type Module interface {
	// Name is the providerClass the module serves, such as "sim".
	Name() string
	// Validate checks a node group's providerConfig. Problems name the
	// manifest's file and the line of the offending key.
	Validate(ng *schema.NodeGroup) []schema.Problem
	// Provider names the TF provider the module's resources need.
	Provider() Provider
	// Resources renders one node group. Machine gives what every machine of
	// the group shares: the names and the Talos config it boots with.
	Resources(m MachineInput) []Resource
	// Mappings declare which TF resource types are machines (or other
	// kinds) and how to read their attributes.
	Mappings() []Mapping
}

// Provider is a TF provider requirement and its configuration block.
type Provider struct {
	LocalName string         // the name in required_providers, e.g. "rezussim"
	Source    string         // the provider source address
	Version   string         // a version constraint, or "" for any
	Config    map[string]any // the provider block; nil for an empty one
}

// MachineInput is what a module gets to render one node group.
type MachineInput struct {
	Tenant    string
	NodeGroup *schema.NodeGroup
	Role      string
	// TalosVersion is the node group's talosVersion, else the tenant's.
	TalosVersion string
	// ResourceName is the TF resource name to use, unique in the workspace.
	ResourceName string
	// UserData is a TF expression, "${var.…}", whose value is the machine
	// config every machine of the group boots with; "" when there is none.
	// The config itself is a sensitive variable's value and never part of
	// the rendered files.
	UserData string
}

// Resource is one TF resource block.
type Resource struct {
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
	// ConfigHash is the sha256 of the config the machine booted with, when
	// the provider records it.
	ConfigHash string
}

// Modules holds the provider modules of this build, by providerClass.
type Modules map[string]Module

// Builtin returns the provider modules compiled into this build.
func Builtin() Modules {
	return Modules{schema.ProviderSim: Sim{}}
}

// Names returns the module names in sorted order.
func (ms Modules) Names() []string {
	names := make([]string, 0, len(ms))
	for n := range ms {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Validate runs every node group of the desired state through its
// provider module's checks. A providerClass with no module in this build is
// a problem of its own.
func (ms Modules) Validate(d *schema.Desired) []schema.Problem {
	var probs []schema.Problem
	for _, td := range d.Tenants {
		for _, ng := range td.NodeGroups {
			m, ok := ms[ng.Spec.ProviderClass]
			if !ok {
				path := "/spec/providerClass"
				probs = append(probs, schema.Problem{
					File: ng.Source.File, Line: ng.Source.LineOf(path), Column: 1, Path: path,
					Message: fmt.Sprintf("providerClass %q has no provider module in this build (available: %v)", ng.Spec.ProviderClass, ms.Names()),
				})
				continue
			}
			probs = append(probs, m.Validate(ng)...)
		}
	}
	sort.SliceStable(probs, func(i, j int) bool {
		a, b := probs[i], probs[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return probs
}
