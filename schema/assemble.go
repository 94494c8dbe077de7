package schema

import (
	"slices"
	"strings"
)

// assemble runs the checks across documents (unique names, tenants that
// exist) and, when they and everything before found no problem, builds the
// desired state.
func (l *loader) assemble(results []*fileResult) *Desired {
	type key struct{ tenant, name string }
	n := 0
	for _, r := range results {
		n += len(r.docs)
	}
	var (
		tenants   = make(map[string]*document, n/8)
		groups    = make(map[key]*document, n/4)
		patches   = make(map[key]*document, n)
		dependent = make([]*document, 0, n)
	)
	for _, r := range results {
		for _, d := range r.docs {
			switch d.kind {
			case KindTenant:
				if d.name == "" {
					continue
				}
				if first, dup := tenants[d.name]; dup {
					l.problems = append(l.problems, d.problem("/metadata/name", "tenant %q is declared twice: first at %s", d.name, first.where("/metadata/name")))
					continue
				}
				tenants[d.name] = d
			case KindNodeGroup, KindConfigPatch:
				dependent = append(dependent, d)
				if d.name == "" || d.tenant == "" {
					continue
				}
				seen, what := groups, "node group"
				if d.kind == KindConfigPatch {
					seen, what = patches, "config patch"
				}
				k := key{d.tenant, d.name}
				if first, dup := seen[k]; dup {
					l.problems = append(l.problems, d.problem("/metadata/name", "%s %q of tenant %q is declared twice: first at %s", what, d.name, d.tenant, first.where("/metadata/name")))
					continue
				}
				seen[k] = d
			}
		}
	}
	names := make([]string, 0, len(tenants))
	for name := range tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, d := range dependent {
		if d.tenant == "" {
			continue
		}
		if _, ok := tenants[d.tenant]; !ok {
			l.problems = append(l.problems, d.problem(JSONPointer("metadata", "labels", LabelTenant), "tenant %q is not declared by any Tenant manifest%s", d.tenant, suggest(d.tenant, names)))
		}
	}
	if len(l.problems) > 0 {
		return nil
	}

	byName := make(map[string]*TenantDesired, len(tenants))
	desired := &Desired{Tenants: make([]*TenantDesired, 0, len(tenants))}
	for _, name := range names {
		td := &TenantDesired{Tenant: tenants[name].obj.(*Tenant)}
		byName[name] = td
		desired.Tenants = append(desired.Tenants, td)
	}
	for _, d := range dependent {
		td := byName[d.tenant]
		switch o := d.obj.(type) {
		case *NodeGroup:
			td.NodeGroups = append(td.NodeGroups, o)
		case *ConfigPatch:
			td.Patches = append(td.Patches, o)
		}
	}
	for _, td := range desired.Tenants {
		slices.SortFunc(td.NodeGroups, func(a, b *NodeGroup) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
		slices.SortFunc(td.Patches, func(a, b *ConfigPatch) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	}
	return desired
}
