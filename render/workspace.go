package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// MainFile is the name of the rendered configuration in a workspace.
const MainFile = "main.tf.json"

// Workspace is the rendered OpenTofu configuration of one tenant.
//
// Its files hold no secret: the secrets bundle and the machine configs,
// which carry the cluster's private keys, are values of sensitive
// variables that the configuration declares without a default. A run hands
// them to tofu in a var file (VarFile) that exists only while tofu plans,
// so that nothing secret rests in a work directory between runs.
type Workspace struct {
	Tenant string
	// Files maps file names to their bytes. Rendering the same desired
	// state and projected state again gives the same bytes. They are safe
	// to keep on disk.
	Files map[string][]byte
	// Variables are the values of the configuration's sensitive variables,
	// by name: the secrets bundle and the machine config of each node
	// group. They must never be written with Files.
	Variables map[string]string
	// Hash is the sha256 of all files, names included, and of the
	// variables: equal hashes mean byte-identical workspaces with equal
	// secrets.
	Hash string
	// InitInputs are the parts of the configuration that `tofu init`
	// depends on (backend and required providers); init runs again only
	// when they change.
	InitInputs []byte
}

// SecretsResource is the TF address of the resource that keeps a tenant's
// Talos secrets bundle in its state, and SecretsVariable the sensitive
// variable that feeds it. The bundle is the resource's triggers_replace,
// which tofu shows only as a sensitive value, and later changes of it are
// ignored: the resource is never replaced and the bundle never changes.
//
// SecretsAttribute names that attribute.
const (
	SecretsResource  = "terraform_data.talos_bundle"
	SecretsAttribute = "triggers_replace"
	SecretsVariable  = "talos_secrets"
)

// FormerSecretsResource is the resource that kept the bundle in the states
// of earlier versions, as its input. terraform_data copies its input to
// its output, and tofu prints that output in plain text in every plan that
// destroys or forgets the resource. Every workspace has tofu forget it
// (a removed block, nothing is destroyed); the run that does so creates
// SecretsResource with the same bundle, which the reconciler read from the
// former resource's input (FormerSecretsAttribute).
const (
	FormerSecretsResource  = "terraform_data.talos_secrets"
	FormerSecretsAttribute = "input"
)

// MachineConfigVariable names the sensitive variable that holds the Talos
// machine config a node group's machines boot with.
func MachineConfigVariable(nodeGroup string) string {
	return "machine_config_" + nodeGroup
}

// Render turns one tenant's desired state into its workspace: every node
// group's machines with the Talos machine config of their role as user
// data, and the tenant's secrets bundle kept in state by a terraform_data
// resource whose later input changes are ignored, so the cluster's CAs live
// as long as the tenant. The bundle and the machine configs are variables
// (see Workspace). The backend block is an empty http backend: the address
// and credentials reach tofu through TF_HTTP_* variables, never through
// files.
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
	variables := map[string]any{SecretsVariable: sensitiveVariable("The tenant's Talos secrets bundle. Only its first value is kept: later changes are ignored.")}
	values := map[string]string{SecretsVariable: string(secretsBundle)}
	for _, ng := range td.NodeGroups {
		m, ok := ms[ng.Spec.ProviderClass]
		if !ok {
			return nil, fmt.Errorf("render %s: node group %s: providerClass %q has no provider module", tenant, ng.Metadata.Name, ng.Spec.ProviderClass)
		}
		if p := m.Provider(); !p.Builtin {
			req := map[string]any{"source": p.Source}
			if p.Version != "" {
				req["version"] = p.Version
			}
			providers[p.LocalName] = req
			if err := addProviderConfig(configs, p.LocalName, m.ProviderConfig(ng)); err != nil {
				return nil, fmt.Errorf("render %s: node group %s: %w", tenant, ng.Metadata.Name, err)
			}
		}
		machineConfig, err := talos.MachineConfig(configInput(m, td, ng, secretsBundle))
		if err != nil {
			return nil, fmt.Errorf("render %s: node group %s: %w", tenant, ng.Metadata.Name, err)
		}
		if cc, ok := m.(module.ConfigChecker); ok {
			if probs := cc.CheckConfig(ng, machineConfig); len(probs) > 0 {
				return nil, fmt.Errorf("render %s: %s", tenant, probs[0])
			}
		}
		sum := sha256.Sum256(machineConfig)
		configVar := MachineConfigVariable(ng.Metadata.Name)
		variables[configVar] = sensitiveVariable("The Talos machine config the machines of node group " + ng.Metadata.Name + " boot with.")
		values[configVar] = string(machineConfig)
		in := MachineInput{
			Tenant:         tenant,
			NodeGroup:      ng,
			Role:           ng.Role(),
			TalosVersion:   talosVersion(td, ng),
			ResourceName:   ResourceName(ng.Metadata.Name),
			UserData:       "${var." + configVar + "}",
			UserDataBase64: "${base64encode(var." + configVar + ")}",
			ConfigHash:     hex.EncodeToString(sum[:]),
		}
		if err := addBlocks(resources, data, m.Resources(in)); err != nil {
			return nil, fmt.Errorf("render %s: %w", tenant, err)
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
	doc["variable"] = variables
	if resources["terraform_data"] == nil {
		resources["terraform_data"] = map[string]any{}
	}
	addSecrets(doc, resources)
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
		Variables:  values,
		InitInputs: initInputs,
	}
	vars, err := ws.VarFile()
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", tenant, err)
	}
	ws.Hash = hashFiles(ws.Files, vars)
	return ws, nil
}

// addSecrets declares the resource that keeps the secrets bundle
// (SecretsResource) and has tofu forget the one that kept it before
// (FormerSecretsResource).
func addSecrets(doc map[string]any, resources map[string]map[string]any) {
	_, name, _ := strings.Cut(SecretsResource, ".")
	resources["terraform_data"][name] = map[string]any{
		SecretsAttribute: "${var." + SecretsVariable + "}",
		"lifecycle":      map[string]any{"ignore_changes": []string{SecretsAttribute}},
	}
	doc["removed"] = []any{map[string]any{
		"from":      FormerSecretsResource,
		"lifecycle": map[string]any{"destroy": false},
	}}
}

// addBlocks adds a module's resources and data sources to the blocks of
// the workspace by type and name; resources wait for the secrets.
func addBlocks(resources, data map[string]map[string]any, rs []Resource) error {
	for _, r := range rs {
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
			return fmt.Errorf("two blocks named %s.%s", r.Type, r.Name)
		}
		byName[r.Name] = r.Body
	}
	return nil
}

// sensitiveVariable declares a string variable that tofu never shows and
// that has no default: a run without its value fails instead of creating
// machines without a config.
func sensitiveVariable(description string) map[string]any {
	return map[string]any{"type": "string", "sensitive": true, "description": description}
}

// VarFile returns the workspace's variables as a .tfvars.json document.
// The same variables give the same bytes.
func (ws *Workspace) VarFile() ([]byte, error) {
	return marshal(ws.Variables)
}

// PlaceholderVarFile returns a .tfvars.json document that gives every
// variable a rendered main.tf.json declares an empty value. A destroy plan
// needs a value for each variable but uses none of them, and the secrets
// of a tenant that is being destroyed need not be rendered again.
func PlaceholderVarFile(mainTF []byte) ([]byte, error) {
	var doc struct {
		Variable map[string]json.RawMessage `json:"variable"`
	}
	if err := json.Unmarshal(mainTF, &doc); err != nil {
		return nil, fmt.Errorf("read workspace variables: %w", err)
	}
	vals := make(map[string]string, len(doc.Variable))
	for name := range doc.Variable {
		vals[name] = ""
	}
	return marshal(vals)
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

// configInput is the input of a node group's machine config: metal mode
// and the module's install disk for the machines of an Installer module.
func configInput(m Module, td *schema.TenantDesired, ng *schema.NodeGroup, bundle []byte) talos.ConfigInput {
	in := talos.InputFor(td, ng, bundle)
	if inst, ok := m.(module.Installer); ok {
		in.Mode = talos.ModeMetal
		in.InstallDisk = inst.InstallDisk(ng)
	}
	return in
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

// hashFiles digests the files, names included, and the var file.
func hashFiles(files map[string][]byte, vars []byte) string {
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
	fmt.Fprintf(h, "\x00variables\x00%d\x00", len(vars))
	h.Write(vars)
	return hex.EncodeToString(h.Sum(nil))
}

// MachineConfigsHolding renders every node group's machine config as
// Render does, by node group name, with the Kubernetes components from
// index next of talos.UpgradeOrder on held at version from: the configs
// of a step of an upgrade of Kubernetes, which the Talos plane rolls one
// component at a time.
func (ms Modules) MachineConfigsHolding(td *schema.TenantDesired, secretsBundle []byte, from string, next int) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, ng := range td.NodeGroups {
		m, ok := ms[ng.Spec.ProviderClass]
		if !ok {
			return nil, fmt.Errorf("node group %s: providerClass %q has no provider module", ng.Metadata.Name, ng.Spec.ProviderClass)
		}
		in := configInput(m, td, ng, secretsBundle)
		in.Components = talos.Holding(from, next)
		cfg, err := talos.MachineConfig(in)
		if err != nil {
			return nil, fmt.Errorf("node group %s: %w", ng.Metadata.Name, err)
		}
		out[ng.Metadata.Name] = cfg
	}
	return out, nil
}
