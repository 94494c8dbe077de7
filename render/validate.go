package render

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// PrepareValidation starts making, in the background, what ValidateTalos
// needs first: the throwaway secrets bundle of the newest Talos version.
// A server calls it when it starts, before its first fetch.
func PrepareValidation() { talos.PrepareValidationSecrets() }

// ValidateTalos renders the machine config of every node group of td, with
// td's patches applied in the documented order, and reports what Talos
// rejects: a version pair it cannot render, or a patch that does not load,
// does not apply or breaks the config, named by the patch's file and line.
// It renders with a throwaway bundle, so it can run before the tenant has
// secrets of its own. It checks with the modules of this build.
func ValidateTalos(td *schema.TenantDesired) []schema.Problem {
	return Builtin().ValidateTalos(td)
}

// ValidateTalos is the package's ValidateTalos with the modules ms; it also
// asks each module that limits the config its cloud can deliver
// (module.ConfigChecker) about the config of each of its node groups.
func (ms Modules) ValidateTalos(td *schema.TenantDesired) []schema.Problem {
	t := td.Tenant
	if err := talos.CheckVersions(t.Spec.TalosVersion, t.Spec.KubernetesVersion); err != nil {
		path := "/spec/talosVersion"
		return []schema.Problem{{File: t.Source.File, Line: t.Source.LineOf(path), Column: 1, Path: path, Message: err.Error()}}
	}
	var probs []schema.Problem
	for _, ng := range td.NodeGroups {
		version := talosVersion(td, ng)
		if ng.Spec.TalosVersion != "" {
			if err := talos.CheckVersions(version, t.Spec.KubernetesVersion); err != nil {
				path := "/spec/talosVersion"
				probs = append(probs, schema.Problem{File: ng.Source.File, Line: ng.Source.LineOf(path), Column: 1, Path: path, Message: err.Error()})
				continue
			}
		}
		bundle, err := talos.ValidationSecrets(version)
		if err != nil {
			probs = append(probs, schema.Problem{File: ng.Source.File, Line: ng.Source.Line, Column: 1, Message: fmt.Sprintf("Talos %s: %v", version, err)})
			continue
		}
		err = checkConfig(ms[ng.Spec.ProviderClass], td, ng, bundle, &probs)
		if err == nil {
			continue
		}
		var pe *talos.PatchError
		if errors.As(err, &pe) {
			file, line := splitPosition(pe.Patch.Source)
			probs = append(probs, schema.Problem{File: file, Line: line, Column: 1,
				Message: fmt.Sprintf("node group %s (%s): %v", ng.Metadata.Name, ng.Role(), err)})
			continue
		}
		probs = append(probs, schema.Problem{File: ng.Source.File, Line: ng.Source.Line, Column: 1,
			Message: fmt.Sprintf("node group %s: Talos machine config: %v", ng.Metadata.Name, err)})
	}
	return dedupe(probs)
}

// checkConfig checks the Talos config of ng: with the module's own check
// of the YAML where it has one (module.ConfigChecker), whose problems it
// adds to probs, else with talos.CheckMachineConfig, which needs no YAML.
func checkConfig(m Module, td *schema.TenantDesired, ng *schema.NodeGroup, bundle []byte, probs *[]schema.Problem) error {
	in := configInput(m, td, ng, bundle)
	cc, ok := m.(module.ConfigChecker)
	if !ok {
		return talos.CheckMachineConfig(in)
	}
	cfg, err := talos.MachineConfig(in)
	if err == nil {
		*probs = append(*probs, cc.CheckConfig(ng, cfg)...)
	}
	return err
}

// splitPosition splits "file:line".
func splitPosition(pos string) (string, int) {
	i := strings.LastIndexByte(pos, ':')
	if i < 0 {
		return pos, 0
	}
	n, err := strconv.Atoi(pos[i+1:])
	if err != nil {
		return pos, 0
	}
	return pos[:i], n
}

// dedupe drops repeated problems: a tenant patch that breaks every node
// group's config is reported once per node group, which is useful, but the
// same message twice is not.
func dedupe(probs []schema.Problem) []schema.Problem {
	seen := map[string]bool{}
	out := probs[:0]
	for _, p := range probs {
		k := p.String()
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out
}
