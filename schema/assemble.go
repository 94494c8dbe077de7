package schema

import (
	"slices"
	"strings"
)

// assemble runs the checks across documents (unique names, tenants that
// exist) and, when they and everything before found no problem, builds the
// desired state. With a cache, it starts from what the cache's last load
// without a problem assembled and rechecks only the documents of the files
// that changed since (see assembly); any doubt, and any problem, runs the
// whole check instead, so that the result and the problems are those of a
// load without a cache.
func (l *loader) assemble(files []manifestFile, results []*fileResult) *Desired {
	if l.cache == nil {
		return l.assembleAll(files, results, false)
	}
	if len(l.problems) == 0 {
		if a := l.cache.takeAssembly(); a != nil && a.update(files, results) {
			l.cache.keepAssembly(a, true)
			return a.desired()
		}
	}
	return l.assembleAll(files, results, true)
}

// assembleAll runs the checks across every document; keep keeps what they
// found in the cache when there is no problem.
func (l *loader) assembleAll(files []manifestFile, results []*fileResult, keep bool) *Desired {
	type key = docKey
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
	if keep {
		a := &assembly{tenants: tenants, groups: groups, patches: patches, deps: make(map[string][]*document, len(tenants)), names: names}
		for _, d := range dependent {
			a.deps[d.tenant] = append(a.deps[d.tenant], d)
		}
		a.setFiles(files, results)
		l.cache.keepAssembly(a, false)
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

// docKey names a node group or config patch: its tenant and its name.
type docKey struct{ tenant, name string }

// assembly is what the checks across documents found in a load without a
// problem: each file's result, the documents by name, and the node groups
// and config patches of each tenant. A later load updates it by the files
// whose result changed (see update) instead of checking every document.
type assembly struct {
	files   []string      // the files' names, sorted
	results []*fileResult // what each file held, as the cache hands it out
	tenants map[string]*document
	groups  map[docKey]*document
	patches map[docKey]*document
	deps    map[string][]*document // node groups and config patches by tenant
	names   []string               // the tenants' names, sorted
	// built are the tenants as desired last handed them out, their node
	// groups and patches sorted; update drops those it touches.
	built map[string]*TenantDesired
}

func (a *assembly) setFiles(files []manifestFile, results []*fileResult) {
	a.files = make([]string, len(files))
	for i, f := range files {
		a.files[i] = f.name
	}
	a.results = results
}

// update brings the assembly to files and their results, rechecking only
// the documents of the files that are new, gone or changed (a changed
// file's result is another object). It returns false, leaving the
// assembly unusable, when the change is large or anything it meets could
// be a problem (a name declared twice, a tenant that does not exist, a
// name missing), which only the whole check reports as a load without a
// cache does.
func (a *assembly) update(files []manifestFile, results []*fileResult) bool {
	gone, added, ok := a.changes(files, results)
	if !ok {
		return false
	}
	touched := map[string]bool{}
	for _, d := range gone {
		if !a.remove(d, touched) {
			return false
		}
	}
	for _, d := range added {
		if !a.add(d, touched) {
			return false
		}
	}
	renamed := false
	for name := range touched {
		if a.tenants[name] == nil {
			if len(a.deps[name]) > 0 {
				return false // documents of a tenant that is not declared
			}
			delete(a.deps, name)
		}
		delete(a.built, name)
		_, had := slices.BinarySearch(a.names, name)
		renamed = renamed || had != (a.tenants[name] != nil)
	}
	if renamed {
		a.names = make([]string, 0, len(a.tenants))
		for name := range a.tenants {
			a.names = append(a.names, name)
		}
		slices.Sort(a.names)
	}
	a.setFiles(files, results)
	return true
}

// changes returns the documents of the files gone or changed since the
// assembly's load and those of the files new or changed, by a walk of both
// sorted lists of names; false when many files changed, or the names are
// not sorted.
func (a *assembly) changes(files []manifestFile, results []*fileResult) (gone, added []*document, ok bool) {
	limit := len(files)/4 + 16
	changed := 0
	i, j := 0, 0
	for i < len(a.files) || j < len(files) {
		if j > 0 && j < len(files) && files[j].name <= files[j-1].name {
			return nil, nil, false
		}
		switch {
		case j == len(files) || (i < len(a.files) && a.files[i] < files[j].name):
			gone = append(gone, a.results[i].docs...)
			i++
		case i == len(a.files) || files[j].name < a.files[i]:
			added = append(added, results[j].docs...)
			j++
		default:
			if a.results[i] == results[j] {
				i, j = i+1, j+1
				continue
			}
			gone = append(gone, a.results[i].docs...)
			added = append(added, results[j].docs...)
			i, j = i+1, j+1
		}
		if changed++; changed > limit {
			return nil, nil, false
		}
	}
	return gone, added, true
}

// remove takes out a document of a file gone or changed; false when it is
// not the one the assembly holds under its name.
func (a *assembly) remove(d *document, touched map[string]bool) bool {
	switch d.kind {
	case KindTenant:
		if a.tenants[d.name] != d {
			return false
		}
		delete(a.tenants, d.name)
		touched[d.name] = true
	case KindNodeGroup, KindConfigPatch:
		m := a.byKind(d.kind)
		k := docKey{d.tenant, d.name}
		if m[k] != d {
			return false
		}
		delete(m, k)
		deps := a.deps[d.tenant]
		i := slices.Index(deps, d)
		if i < 0 {
			return false
		}
		a.deps[d.tenant] = slices.Delete(slices.Clone(deps), i, i+1)
		touched[d.tenant] = true
	}
	return true
}

// add puts in a document of a file new or changed; false when its name is
// missing or taken.
func (a *assembly) add(d *document, touched map[string]bool) bool {
	switch d.kind {
	case KindTenant:
		if d.name == "" || a.tenants[d.name] != nil {
			return false
		}
		a.tenants[d.name] = d
		touched[d.name] = true
	case KindNodeGroup, KindConfigPatch:
		m := a.byKind(d.kind)
		k := docKey{d.tenant, d.name}
		if d.name == "" || d.tenant == "" || m[k] != nil {
			return false
		}
		m[k] = d
		a.deps[d.tenant] = append(slices.Clip(a.deps[d.tenant]), d)
		touched[d.tenant] = true
	}
	return true
}

func (a *assembly) byKind(kind string) map[docKey]*document {
	if kind == KindConfigPatch {
		return a.patches
	}
	return a.groups
}

// desired builds the desired state the assembly declares, in new objects
// (the documents' objects are shared, as the cache hands them out).
func (a *assembly) desired() *Desired {
	if a.built == nil {
		a.built = make(map[string]*TenantDesired, len(a.names))
	}
	desired := &Desired{Tenants: make([]*TenantDesired, 0, len(a.names))}
	for _, name := range a.names {
		b := a.built[name]
		if b == nil {
			b = a.build(name)
			a.built[name] = b
		}
		td := &TenantDesired{Tenant: b.Tenant, NodeGroups: slices.Clone(b.NodeGroups), Patches: slices.Clone(b.Patches)}
		desired.Tenants = append(desired.Tenants, td)
	}
	return desired
}

// build makes the tenant name as desired, its node groups and patches
// sorted by name.
func (a *assembly) build(name string) *TenantDesired {
	td := &TenantDesired{Tenant: a.tenants[name].obj.(*Tenant)}
	for _, d := range a.deps[name] {
		switch o := d.obj.(type) {
		case *NodeGroup:
			td.NodeGroups = append(td.NodeGroups, o)
		case *ConfigPatch:
			td.Patches = append(td.Patches, o)
		}
	}
	slices.SortFunc(td.NodeGroups, func(a, b *NodeGroup) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	slices.SortFunc(td.Patches, func(a, b *ConfigPatch) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	return td
}
