package schema

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// jsonDecode is the reference decodeKind: a JSON round trip.
func jsonDecode(t *testing.T, kind string, obj map[string]any) any {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	switch kind {
	case KindTenant:
		v = new(Tenant)
	case KindNodeGroup:
		v = new(NodeGroup)
	case KindConfigPatch:
		v = new(ConfigPatch)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDecodeMatchesJSON holds the direct decoders to what encoding/json
// makes of the same documents, field by field.
func TestDecodeMatchesJSON(t *testing.T) {
	docs := []map[string]any{
		{
			"apiVersion": APIVersion, "kind": KindTenant,
			"metadata": map[string]any{"name": "prod", "labels": map[string]any{"a": "b"}, "annotations": map[string]any{"c": "d"}},
			"spec": map[string]any{
				"kubernetesVersion": "1.34.1", "talosVersion": "1.12.6", "controlPlaneEndpoint": "https://x:6443",
				"podNetwork": []any{"10.244.0.0/16"}, "serviceNetwork": []any{"10.96.0.0/12", "fd00::/108"},
				"plugins": map[string]any{
					"cni": map[string]any{"type": "cilium", "version": "1.18.2", "values": map[string]any{"n": 3, "big": uint64(1 << 40), "f": 1.5, "l": []any{int64(1), "x", nil, true}}},
					"csi": map[string]any{"type": "local-path"},
				},
				"configPatches": []any{map[string]any{"name": "a", "patch": "machine: {}\n"}},
				"maintenanceWindows": []any{
					map[string]any{"schedule": "0 2 * * 6", "duration": "4h", "timeZone": "Europe/Berlin"},
					map[string]any{"schedule": "@daily", "duration": "1h"},
				},
				"drain":   map[string]any{"timeout": "5m", "ignoreDaemonSets": false, "onTimeout": "force", "onUnreachable": "proceed"},
				"rollout": map[string]any{"waitFor": "tier in (web, db)"},
				"backup":  map[string]any{"schedule": "0 3 * * *", "timeZone": "Europe/Berlin", "keep": 14},
				"restore": map[string]any{"backup": "20261205T083000Z-1a2b3c4d"},
			},
		},
		{
			"apiVersion": APIVersion, "kind": KindTenant,
			"metadata": map[string]any{"name": "bare"},
			"spec":     map[string]any{"kubernetesVersion": "1.34.1", "talosVersion": "1.12.6", "controlPlaneEndpoint": "https://x:6443", "plugins": map[string]any{}},
		},
		{
			"apiVersion": APIVersion, "kind": KindTenant,
			"metadata": map[string]any{"name": "interval"},
			"spec": map[string]any{"kubernetesVersion": "1.34.1", "talosVersion": "1.12.6", "controlPlaneEndpoint": "https://x:6443",
				"backup": map[string]any{"interval": "6h", "keep": int64(3)}},
		},
		{
			"apiVersion": APIVersion, "kind": KindNodeGroup,
			"metadata": map[string]any{"name": "w", "labels": map[string]any{LabelTenant: "prod", LabelRole: RoleWorker}},
			"spec": map[string]any{"count": 3, "providerClass": "sim", "providerConfig": map[string]any{"shape": "small", "disk": map[string]any{"size": 20}},
				"talosVersion": "1.12.6", "configPatches": []any{}, "drain": map[string]any{"deleteEmptyDirData": true}},
		},
		{
			"apiVersion": APIVersion, "kind": KindNodeGroup,
			"metadata": map[string]any{"name": "w", "labels": map[string]any{LabelTenant: "prod", LabelRole: RoleWorker}},
			"spec":     map[string]any{"count": float64(2), "providerClass": "sim", "providerConfig": map[string]any{}},
		},
		{
			"apiVersion": APIVersion, "kind": KindConfigPatch,
			"metadata": map[string]any{"name": "ntp", "labels": map[string]any{LabelTenant: "prod"}},
			"spec":     map[string]any{"targetRole": RoleControlPlane, "patch": "machine: {}\n"},
		},
	}
	for _, obj := range docs {
		kind := obj["kind"].(string)
		got, err := decodeKind(kind, obj)
		if err != nil {
			t.Fatal(err)
		}
		want := jsonDecode(t, kind, obj)
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s %v: direct decode differs from encoding/json (-json +direct):\n%s", kind, obj["metadata"], diff)
		}
	}
	// The opaque objects share nothing with the document.
	shared := map[string]any{"shape": "small"}
	obj := map[string]any{"kind": KindNodeGroup, "spec": map[string]any{"providerConfig": shared}}
	g := decodeNodeGroup(obj)
	g.Spec.ProviderConfig["shape"] = "large"
	if shared["shape"] != "small" {
		t.Error("providerConfig aliases the document")
	}
}
