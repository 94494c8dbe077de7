package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/rezuscloud/rezuscloud/schema"
)

// MainFile is the name of the rendered configuration in a workspace.
const MainFile = "main.tf.json"

// Workspace is the rendered OpenTofu configuration of one tenant.
type Workspace struct {
	Tenant string
	// Files maps file names to their bytes. Rendering the same desired
	// state and projected state again gives the same bytes.
	Files map[string][]byte
	// Hash is the sha256 of all files, names included: equal hashes mean
	// byte-identical workspaces.
	Hash string
	// InitInputs are the parts of the configuration that `tofu init`
	// depends on (backend and required providers); init runs again only
	// when they change.
	InitInputs []byte
}

// Render turns one tenant's desired state into its workspace. The backend
// block is an empty http backend: the address and credentials reach tofu
// through TF_HTTP_* variables, never through files.
func (ms Modules) Render(td *schema.TenantDesired) (*Workspace, error) {
	tenant := td.Tenant.Metadata.Name
	providers := map[string]any{}
	providerBlocks := map[string]any{}
	resources := map[string]map[string]any{}
	for _, ng := range td.NodeGroups {
		m, ok := ms[ng.Spec.ProviderClass]
		if !ok {
			return nil, fmt.Errorf("render %s: node group %s: providerClass %q has no provider module", tenant, ng.Metadata.Name, ng.Spec.ProviderClass)
		}
		p := m.Provider()
		req := map[string]any{"source": p.Source}
		if p.Version != "" {
			req["version"] = p.Version
		}
		providers[p.LocalName] = req
		cfg := p.Config
		if cfg == nil {
			cfg = map[string]any{}
		}
		providerBlocks[p.LocalName] = cfg
		in := MachineInput{
			Tenant:       tenant,
			NodeGroup:    ng,
			Role:         ng.Role(),
			TalosVersion: talosVersion(td, ng),
			ResourceName: ResourceName(ng.Metadata.Name),
		}
		for _, r := range m.Resources(in) {
			byName := resources[r.Type]
			if byName == nil {
				byName = map[string]any{}
				resources[r.Type] = byName
			}
			if _, dup := byName[r.Name]; dup {
				return nil, fmt.Errorf("render %s: two resources named %s.%s", tenant, r.Type, r.Name)
			}
			byName[r.Name] = r.Body
		}
	}

	terraform := map[string]any{"backend": map[string]any{"http": map[string]any{}}}
	if len(providers) > 0 {
		terraform["required_providers"] = providers
	}
	doc := map[string]any{"terraform": terraform}
	if len(providerBlocks) > 0 {
		doc["provider"] = providerBlocks
	}
	if len(resources) > 0 {
		doc["resource"] = resources
	}
	main, err := marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", tenant, err)
	}
	initInputs, err := marshal(terraform)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", tenant, err)
	}
	ws := &Workspace{
		Tenant:     tenant,
		Files:      map[string][]byte{MainFile: main},
		InitInputs: initInputs,
	}
	ws.Hash = hashFiles(ws.Files)
	return ws, nil
}

// talosVersion is the Talos version a node group's machines run: its own,
// else the tenant's.
func talosVersion(td *schema.TenantDesired, ng *schema.NodeGroup) string {
	if ng.Spec.TalosVersion != "" {
		return ng.Spec.TalosVersion
	}
	return td.Tenant.Spec.TalosVersion
}

// ResourceName turns a node group name (a DNS-1123 label, which may start
// with a digit) into a TF resource name, which may not.
func ResourceName(nodeGroup string) string {
	return "ng_" + nodeGroup
}

// marshal encodes v as indented JSON with sorted keys and without HTML
// escaping, so that "${count.index}" and "<" stay readable.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func hashFiles(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}
