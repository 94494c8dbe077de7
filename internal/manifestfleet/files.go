package manifestfleet

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing/fstest"
)

// Layout is how a tenant's documents are spread over files, under the
// fleet's Dir. The files of several documents (nodegroups.yaml,
// patches.yaml, NAME.yaml) start each document with "---".
type Layout int

const (
	// FilePerDocument is NAME/tenant.yaml, NAME/ng-GROUP.yaml for each
	// node group and NAME/PATCH.yaml for each ConfigPatch.
	FilePerDocument Layout = iota
	// FilePerKind is NAME/tenant.yaml, NAME/nodegroups.yaml and
	// NAME/patches.yaml, the last two when the tenant has such documents.
	FilePerKind
	// FilePerTenant is NAME.yaml, all of the tenant's documents in one
	// file, so that a change to a tenant changes one file.
	FilePerTenant
)

// Files returns the fleet's files (every tenant's, and Extra) by their
// slash-separated path in the repository.
func (o Options) Files() map[string][]byte {
	out := make(map[string][]byte, o.Tenants*(3+o.Patches)+len(o.Extra))
	for i := range o.Tenants {
		maps.Copy(out, o.TenantFiles(i))
	}
	maps.Copy(out, o.Extra)
	return out
}

// TenantFiles returns the files of tenant i by their path.
func (o Options) TenantFiles(i int) map[string][]byte {
	t := o.Tenant(i)
	root := o.Dir
	if root == "" {
		root = "tenants"
	}
	dir := path.Join(root, t.Name)
	tenant := t.tenantDocument(o.SchemaComment)
	groups := make([]string, len(t.Groups))
	for i, g := range t.Groups {
		groups[i] = groupDocument(t.Name, g)
	}
	patches := make([]string, len(t.ConfigPatches))
	for i, p := range t.ConfigPatches {
		patches[i] = patchDocument(t.Name, p)
	}
	out := map[string][]byte{}
	switch o.Layout {
	case FilePerTenant:
		out[path.Join(root, t.Name+".yaml")] = several(append(append([]string{tenant}, groups...), patches...))
	case FilePerKind:
		out[path.Join(dir, "tenant.yaml")] = []byte(tenant)
		for name, docs := range map[string][]string{"nodegroups.yaml": groups, "patches.yaml": patches} {
			if len(docs) > 0 {
				out[path.Join(dir, name)] = several(docs)
			}
		}
	default:
		out[path.Join(dir, "tenant.yaml")] = []byte(tenant)
		for i, g := range t.Groups {
			out[path.Join(dir, "ng-"+g.Name+".yaml")] = []byte(groups[i])
		}
		for i, p := range t.ConfigPatches {
			out[path.Join(dir, p.Name+".yaml")] = []byte(patches[i])
		}
	}
	return out
}

// several is the file of docs, each started with "---".
func several(docs []string) []byte {
	var b strings.Builder
	for _, d := range docs {
		b.WriteString("---\n" + d)
	}
	return []byte(b.String())
}

// MapFS returns the fleet's files as an in-memory tree, for a Snapshot or
// a load.
func (o Options) MapFS() fstest.MapFS {
	files := o.Files()
	m := make(fstest.MapFS, len(files))
	for p, b := range files {
		m[p] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	return m
}

// WriteDir writes the fleet's files under dir, as Files gives them. It
// rewrites only the files whose content differs, each by a rename, so
// that a watcher sees only real changes and never half a file; it
// removes nothing.
func (o Options) WriteDir(dir string) error { return writeFiles(dir, o.Files()) }

// WriteTenant writes the files of tenant i under dir, as WriteDir does.
func (o Options) WriteTenant(dir string, i int) error { return writeFiles(dir, o.TenantFiles(i)) }

func writeFiles(dir string, files map[string][]byte) error {
	for _, p := range slices.Sorted(maps.Keys(files)) {
		b := files[p]
		full := filepath.Join(dir, filepath.FromSlash(p))
		if old, err := os.ReadFile(full); err == nil && string(old) == string(b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("write fleet: %w", err)
		}
		tmp := full + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("write fleet: %w", err)
		}
		if err := os.Rename(tmp, full); err != nil {
			return fmt.Errorf("write fleet: %w", err)
		}
	}
	return nil
}
