package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/talos"
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

// SecretsResource is the TF address of the resource that keeps a tenant's
// Talos secrets bundle in its state, and SecretsVariable the sensitive
// variable that feeds it.
const (
	SecretsResource = "terraform_data.talos_secrets"
	SecretsVariable = "talos_secrets"
)

// Render turns one tenant's desired state into its workspace: every node
// group's machines with the Talos machine config of their role as user
// data, and the tenant's secrets bundle kept in state by a terraform_data
// resource whose later input changes are ignored, so the cluster's CAs live
// as long as the tenant. The backend block is an empty http backend: the
// address and credentials reach tofu through TF_HTTP_* variables, never
// through files.
//
// The same desired state and the same bundle give byte-identical files.
func (ms Modules) Render(td *schema.TenantDesired, secretsBundle []byte) (*Workspace, error) {
	tenant := td.Tenant.Metadata.Name
	if len(secretsBundle) == 0 {
		return nil, fmt.Errorf("render %s: no Talos secrets bundle", tenant)
	}
	providers := map[string]any{}
	configs := map[string]map[string]map[string]any{} // local name -> alias -> block
	resources := map[string]map[string]any{}
	data := map[string]map[string]any{}
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
		if err := addProviderConfig(configs, p.LocalName, m.ProviderConfig(ng)); err != nil {
			return nil, fmt.Errorf("render %s: node group %s: %w", tenant, ng.Metadata.Name, err)
		}
		machineConfig, err := talos.MachineConfig(talos.InputFor(td, ng, secretsBundle))
		if err != nil {
			return nil, fmt.Errorf("render %s: node group %s: %w", tenant, ng.Metadata.Name, err)
		}
		if cc, ok := m.(module.ConfigChecker); ok {
			if probs := cc.CheckConfig(ng, machineConfig); len(probs) > 0 {
				return nil, fmt.Errorf("render %s: %s", tenant, probs[0])
			}
		}
		sum := sha256.Sum256(machineConfig)
		in := MachineInput{
			Tenant:         tenant,
			NodeGroup:      ng,
			Role:           ng.Role(),
			TalosVersion:   talosVersion(td, ng),
			ResourceName:   ResourceName(ng.Metadata.Name),
			UserData:       EscapeTemplate(string(machineConfig)),
			UserDataBase64: base64.StdEncoding.EncodeToString(machineConfig),
			ConfigHash:     hex.EncodeToString(sum[:]),
		}
		for _, r := range m.Resources(in) {
			target := resources
			if r.Data {
				target = data
			} else {
				r.Body["depends_on"] = []string{SecretsResource}
			}
			byName := target[r.Type]
			if byName == nil {
				byName = map[string]any{}
				target[r.Type] = byName
			}
			if _, dup := byName[r.Name]; dup {
				return nil, fmt.Errorf("render %s: two blocks named %s.%s", tenant, r.Type, r.Name)
			}
			byName[r.Name] = r.Body
		}
	}

	terraform := map[string]any{"backend": map[string]any{"http": map[string]any{}}}
	if len(providers) > 0 {
		terraform["required_providers"] = providers
	}
	doc := map[string]any{"terraform": terraform}
	if len(configs) > 0 {
		doc["provider"] = providerBlocks(configs)
	}
	if len(data) > 0 {
		doc["data"] = data
	}
	doc["variable"] = map[string]any{SecretsVariable: map[string]any{
		"type":        "string",
		"sensitive":   true,
		"description": "The tenant's Talos secrets bundle. Only its first value is kept: later changes are ignored.",
		"default":     string(secretsBundle),
	}}
	resources["terraform_data"] = map[string]any{"talos_secrets": map[string]any{
		"input":     "${var." + SecretsVariable + "}",
		"lifecycle": map[string]any{"ignore_changes": []string{"input"}},
	}}
	doc["resource"] = resources
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

// addProviderConfig records the provider block a node group needs; node
// groups that share an alias must agree on its body.
func addProviderConfig(configs map[string]map[string]map[string]any, localName string, pc module.ProviderConfig) error {
	body := pc.Body
	if body == nil {
		body = map[string]any{}
	}
	byAlias := configs[localName]
	if byAlias == nil {
		byAlias = map[string]map[string]any{}
		configs[localName] = byAlias
	}
	if prev, ok := byAlias[pc.Alias]; ok {
		a, _ := marshal(prev)
		b, _ := marshal(body)
		if !bytes.Equal(a, b) {
			return fmt.Errorf("provider %s configuration %q differs from another node group's", localName, pc.Alias)
		}
		return nil
	}
	byAlias[pc.Alias] = body
	return nil
}

// providerBlocks is the "provider" object: one block per provider with only
// a default configuration, else a list of blocks, the default first and the
// aliases in sorted order.
func providerBlocks(configs map[string]map[string]map[string]any) map[string]any {
	out := map[string]any{}
	for name, byAlias := range configs {
		if len(byAlias) == 1 && byAlias[""] != nil {
			out[name] = byAlias[""]
			continue
		}
		aliases := make([]string, 0, len(byAlias))
		for a := range byAlias {
			aliases = append(aliases, a)
		}
		sort.Strings(aliases)
		var list []any
		for _, a := range aliases {
			block := map[string]any{}
			for k, v := range byAlias[a] {
				block[k] = v
			}
			if a != "" {
				block["alias"] = a
			}
			list = append(list, block)
		}
		out[name] = list
	}
	return out
}

// talosVersion is the Talos version a node group's machines run: its own,
// else the tenant's.
func talosVersion(td *schema.TenantDesired, ng *schema.NodeGroup) string {
	if ng.Spec.TalosVersion != "" {
		return ng.Spec.TalosVersion
	}
	return td.Tenant.Spec.TalosVersion
}

// EscapeTemplate makes s a literal in a .tf.json string, where "${" and
// "%{" would otherwise start template sequences.
func EscapeTemplate(s string) string { return module.Literal(s) }

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
