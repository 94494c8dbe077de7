package render

import (
	"fmt"
	"sort"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/render/provider/oci"
	"github.com/rezuscloud/rezuscloud/render/provider/openstack"
	"github.com/rezuscloud/rezuscloud/render/provider/sim"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The types of package module, under the names the rest of RezusCloud has
// always used for them.
type (
	Module       = module.Module
	Provider     = module.Provider
	MachineInput = module.MachineInput
	Resource     = module.Resource
	Mapping      = module.Mapping
	MachineFacts = module.MachineFacts
)

// Modules holds the provider modules of this build, by providerClass.
type Modules map[string]Module

// Options are what an operator decides about the built-in modules. The
// zero value is right for real machines.
type Options struct {
	// AllowLoopbackMetal accepts bare-metal machines at loopback
	// addresses, where the simulated machines of tests and of the metal
	// demo listen (metal.Module.AllowLoopback).
	AllowLoopbackMetal bool
}

// Builtin returns the provider modules compiled into this build (sim,
// openstack, oci and metal) with the default Options.
func Builtin() Modules { return BuiltinWith(Options{}) }

// BuiltinWith returns the provider modules compiled into this build, set
// up as o says.
func BuiltinWith(o Options) Modules {
	return Modules{
		schema.ProviderSim:        sim.Module{},
		openstack.Module{}.Name(): openstack.Module{},
		oci.Module{}.Name():       oci.Module{},
		metal.Class:               metal.Module{AllowLoopback: o.AllowLoopbackMetal},
	}
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
			if tc, ok := m.(module.TenantChecker); ok && td.Tenant != nil {
				probs = append(probs, tc.CheckWithTenant(td.Tenant, ng)...)
			}
		}
	}
	sortProblems(probs)
	return probs
}

func sortProblems(probs []schema.Problem) {
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
}
