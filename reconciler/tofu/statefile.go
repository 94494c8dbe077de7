package tofu

import (
	"bytes"
	"encoding/json"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// stateFile is the part of a state file, as tofu writes it (version 4),
// that the projection reads.
type stateFile struct {
	Version          int             `json:"version"`
	TerraformVersion string          `json:"terraform_version"`
	EncryptedData    json.RawMessage `json:"encrypted_data"`
	Outputs          map[string]struct {
		Value     any             `json:"value"`
		Type      json.RawMessage `json:"type"`
		Sensitive bool            `json:"sensitive"`
	} `json:"outputs"`
	Resources []struct {
		Module    string `json:"module"`
		Mode      string `json:"mode"`
		Type      string `json:"type"`
		Name      string `json:"name"`
		Provider  string `json:"provider"`
		Instances []struct {
			IndexKey      any            `json:"index_key"`
			Status        string         `json:"status"`
			Deposed       string         `json:"deposed"`
			SchemaVersion uint64         `json:"schema_version"`
			Attributes    map[string]any `json:"attributes"`
			Dependencies  []string       `json:"dependencies"`
		} `json:"instances"`
	} `json:"resources"`
}

// stateFromFile turns a state file as the state backend stores it into the
// form `tofu show -json` prints, as far as the projection reads it: every
// resource instance with its address, mode, type, name, index, provider and
// attribute values, and the root outputs. SensitiveValues stays empty, and
// attributes of a dynamic type keep the state file's wrapping (see
// builtinDynamic) but for those of tofu's built-in provider. ok is
// false when raw is not a plain version 4 state (an encrypted one, say):
// only tofu can read that.
func stateFromFile(raw []byte) (st *tfjson.State, ok bool) {
	st = &tfjson.State{FormatVersion: "1.0"}
	if len(bytes.TrimSpace(raw)) == 0 {
		return st, true
	}
	var f stateFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // as terraform-json decodes `tofu show -json`
	if err := dec.Decode(&f); err != nil || f.Version != 4 || len(f.EncryptedData) > 0 {
		return nil, false
	}
	st.TerraformVersion = f.TerraformVersion
	root := &tfjson.StateModule{}
	st.Values = &tfjson.StateValues{RootModule: root}
	if len(f.Outputs) > 0 {
		st.Values.Outputs = map[string]*tfjson.StateOutput{}
		for name, o := range f.Outputs {
			out := &tfjson.StateOutput{Sensitive: o.Sensitive, Value: o.Value}
			if t, err := ctyjson.UnmarshalType(o.Type); err == nil {
				out.Type = t
			}
			st.Values.Outputs[name] = out
		}
	}
	modules := map[string]*tfjson.StateModule{"": root}
	module := func(addr string) *tfjson.StateModule {
		if m, ok := modules[addr]; ok {
			return m
		}
		m := &tfjson.StateModule{Address: addr}
		modules[addr] = m
		root.ChildModules = append(root.ChildModules, m)
		return m
	}
	for _, r := range f.Resources {
		mode := tfjson.ManagedResourceMode
		base := r.Type + "." + r.Name
		if r.Mode == "data" {
			mode = tfjson.DataResourceMode
			base = "data." + base
		}
		if r.Module != "" {
			base = r.Module + "." + base
		}
		m := module(r.Module)
		provider := providerName(r.Provider)
		for _, in := range r.Instances {
			if provider == builtinProvider {
				unwrapDynamic(in.Attributes, builtinDynamic[r.Type])
			}
			addr := base
			switch k := in.IndexKey.(type) {
			case json.Number:
				addr += "[" + k.String() + "]"
			case string:
				q, _ := json.Marshal(k)
				addr += "[" + string(q) + "]"
			}
			m.Resources = append(m.Resources, &tfjson.StateResource{
				Address:         addr,
				Mode:            mode,
				Type:            r.Type,
				Name:            r.Name,
				Index:           in.IndexKey,
				ProviderName:    provider,
				SchemaVersion:   in.SchemaVersion,
				AttributeValues: in.Attributes,
				DependsOn:       in.Dependencies,
				Tainted:         in.Status == "tainted",
				DeposedKey:      in.Deposed,
			})
		}
	}
	return st, true
}

// builtinProvider is the address of tofu's built-in provider, and
// builtinDynamic the attributes of its resources that have a dynamic type. A
// state file keeps the value of such an attribute together with its type,
// {"value": V, "type": T}, where `tofu show -json` prints V: without the
// provider's schema only these known ones can be unwrapped.
const builtinProvider = "terraform.io/builtin/terraform"

var builtinDynamic = map[string][]string{
	"terraform_data": {"input", "output", "triggers_replace"},
}

func unwrapDynamic(attrs map[string]any, names []string) {
	for _, name := range names {
		if w, ok := attrs[name].(map[string]any); ok && len(w) == 2 {
			if v, ok := w["value"]; ok {
				if _, ok := w["type"]; ok {
					attrs[name] = v
				}
			}
		}
	}
}

// providerName turns a state file's provider reference,
// provider["registry.opentofu.org/hashicorp/null"], into the address
// `tofu show -json` prints.
func providerName(ref string) string {
	if i, j := strings.Index(ref, `["`), strings.LastIndex(ref, `"]`); i >= 0 && j > i {
		return ref[i+2 : j]
	}
	return ref
}
