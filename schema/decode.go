package schema

import "fmt"

// The functions here turn a document that the schema has accepted into its
// Go type, without the cost of a JSON round trip. They rely on the schema
// for the types of the fields and never fail: a field of an unexpected type
// decodes as its zero value. decode_test.go holds them to the same result as
// encoding/json.

// decodeKind turns a validated document into its Go type.
func decodeKind(kind string, obj map[string]any) (any, error) {
	switch kind {
	case KindTenant:
		return decodeTenant(obj), nil
	case KindNodeGroup:
		return decodeNodeGroup(obj), nil
	case KindConfigPatch:
		return decodeConfigPatch(obj), nil
	}
	return nil, fmt.Errorf("unknown kind %s", kind)
}

func decodeTenant(obj map[string]any) *Tenant {
	spec := asMap(obj["spec"])
	t := &Tenant{
		APIVersion: asString(obj["apiVersion"]),
		Kind:       asString(obj["kind"]),
		Metadata:   decodeMeta(obj["metadata"]),
		Spec: TenantSpec{
			KubernetesVersion:    asString(spec["kubernetesVersion"]),
			TalosVersion:         asString(spec["talosVersion"]),
			ControlPlaneEndpoint: asString(spec["controlPlaneEndpoint"]),
			PodNetwork:           asStrings(spec["podNetwork"]),
			ServiceNetwork:       asStrings(spec["serviceNetwork"]),
			ConfigPatches:        decodePatches(spec["configPatches"]),
			MaintenanceWindows:   decodeWindows(spec["maintenanceWindows"]),
			Drain:                decodeDrain(spec["drain"]),
			Rollout:              decodeRollout(spec["rollout"]),
			Backup:               decodeBackup(spec["backup"]),
			Restore:              decodeRestore(spec["restore"]),
			ServiceAccountKey:    asString(spec["serviceAccountKey"]),
		},
	}
	plugins := asMap(spec["plugins"])
	if cni, ok := plugins["cni"].(map[string]any); ok {
		t.Spec.Plugins.CNI = &CNIPlugin{
			Type:    asString(cni["type"]),
			Version: asString(cni["version"]),
			Values:  jsonObject(cni["values"]),
		}
	}
	if csi, ok := plugins["csi"].(map[string]any); ok {
		t.Spec.Plugins.CSI = &CSIPlugin{Type: asString(csi["type"])}
	}
	return t
}

func decodeNodeGroup(obj map[string]any) *NodeGroup {
	spec := asMap(obj["spec"])
	return &NodeGroup{
		APIVersion: asString(obj["apiVersion"]),
		Kind:       asString(obj["kind"]),
		Metadata:   decodeMeta(obj["metadata"]),
		Spec: NodeGroupSpec{
			Count:          asInt(spec["count"]),
			ProviderClass:  asString(spec["providerClass"]),
			ProviderConfig: jsonObject(spec["providerConfig"]),
			TalosVersion:   asString(spec["talosVersion"]),
			ConfigPatches:  decodePatches(spec["configPatches"]),
			Drain:          decodeDrain(spec["drain"]),
		},
	}
}

func decodeConfigPatch(obj map[string]any) *ConfigPatch {
	spec := asMap(obj["spec"])
	return &ConfigPatch{
		APIVersion: asString(obj["apiVersion"]),
		Kind:       asString(obj["kind"]),
		Metadata:   decodeMeta(obj["metadata"]),
		Spec: ConfigPatchSpec{
			TargetRole: asString(spec["targetRole"]),
			Patch:      asString(spec["patch"]),
		},
	}
}

func decodeMeta(v any) ObjectMeta {
	m := asMap(v)
	return ObjectMeta{
		Name:        asString(m["name"]),
		Labels:      asStringMap(m["labels"]),
		Annotations: asStringMap(m["annotations"]),
	}
}

func decodePatches(v any) []NamedPatch {
	list, _ := v.([]any)
	if list == nil {
		return nil
	}
	out := make([]NamedPatch, len(list))
	for i, item := range list {
		m := asMap(item)
		out[i] = NamedPatch{Name: asString(m["name"]), Patch: asString(m["patch"])}
	}
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	if list == nil {
		return nil
	}
	out := make([]string, len(list))
	for i, x := range list {
		out[i] = asString(x)
	}
	return out
}

func asStringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = asString(x)
	}
	return out
}

func asInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case uint64:
		return int(x)
	case float64:
		return int(x)
	}
	return 0
}

// jsonObject deep-copies an opaque object into the form encoding/json would
// give: numbers as float64. The copy shares nothing with the document, where
// aliases may have made parts of the tree the same value.
func jsonObject(v any) map[string]any {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil
	}
	return jsonValue(m).(map[string]any)
}

func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return v
}
