package schema

import "strings"

// Object is a resource the API serves. It hands its metadata to the store,
// which stamps uid, times and resourceVersion into it.
type Object interface {
	Meta() *ObjectMeta
}

// Meta returns the tenant's metadata.
func (t *Tenant) Meta() *ObjectMeta { return &t.Metadata }

// Meta returns the node group's metadata.
func (g *NodeGroup) Meta() *ObjectMeta { return &g.Metadata }

// Meta returns the patch's metadata.
func (p *ConfigPatch) Meta() *ObjectMeta { return &p.Metadata }

// Meta returns the machine's metadata.
func (m *Machine) Meta() *ObjectMeta { return &m.Metadata }

// Meta returns the provider's metadata.
func (p *Provider) Meta() *ObjectMeta { return &p.Metadata }

// Meta returns the commit's metadata.
func (c *Commit) Meta() *ObjectMeta { return &c.Metadata }

// KindInfo describes one kind the API serves.
type KindInfo struct {
	// Kind is the kind's name, e.g. "NodeGroup".
	Kind string
	// Word is how messages name one object of the kind: "node group".
	Word string
	// InTenant says the kind's objects belong to a tenant, which their
	// LabelTenant label names (see TenantOf).
	InTenant bool
	// Declarable kinds are declared in git; the others only the API
	// serves.
	Declarable bool
	// New returns an empty object of the kind.
	New func() Object
}

// kinds is the table of served kinds, in the order the API lists them.
var kinds = []KindInfo{
	{Kind: KindTenant, Word: "tenant", Declarable: true, New: func() Object { return new(Tenant) }},
	{Kind: KindNodeGroup, Word: "node group", InTenant: true, Declarable: true, New: func() Object { return new(NodeGroup) }},
	{Kind: KindConfigPatch, Word: "config patch", InTenant: true, Declarable: true, New: func() Object { return new(ConfigPatch) }},
	{Kind: KindMachine, Word: "machine", InTenant: true, New: func() Object { return new(Machine) }},
	{Kind: KindProvider, Word: "provider", New: func() Object { return new(Provider) }},
	{Kind: KindCommit, Word: "commit", New: func() Object { return new(Commit) }},
}

// Kinds returns the kinds the API serves, in the order it lists them.
func Kinds() []KindInfo { return append([]KindInfo(nil), kinds...) }

// LookupKind returns the description of a served kind; ok is false for
// any other kind name.
func LookupKind(kind string) (k KindInfo, ok bool) {
	for _, k := range kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindInfo{}, false
}

// kindNames returns the names of the kinds that are declarable, or not.
func kindNames(declarable bool) []string {
	var out []string
	for _, k := range kinds {
		if k.Declarable == declarable {
			out = append(out, k.Kind)
		}
	}
	return out
}

// TenantOf is the one rule of ownership: a Tenant belongs to itself, an
// object of a kind that lives in tenants (NodeGroup, ConfigPatch, Machine)
// to the tenant its LabelTenant label names, and anything else to no
// tenant ("").
func TenantOf(kind string, m *ObjectMeta) string {
	if kind == KindTenant {
		return m.Name
	}
	if k, ok := LookupKind(kind); ok && k.InTenant {
		return m.Labels[LabelTenant]
	}
	return ""
}

// CommitName is the name, and store key, of the Commit of a revision: the
// revision with ":" written as "-", so that a directory's content hash
// "sha256:…" makes a valid name.
func CommitName(revision string) string { return strings.ReplaceAll(revision, ":", "-") }

// PreviewCommitName is the name of the Commit of a preview (plan-only) run
// of a revision.
func PreviewCommitName(revision string) string { return "preview-" + CommitName(revision) }
