package openstack_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/provider/openstack"
	"github.com/rezuscloud/rezuscloud/schema"
)

const tenant = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
---
`

// nodeGroup loads one node group (at line 10 of t.yaml, after the tenant;
// its providerConfig starts at line 21).
func nodeGroup(t *testing.T, providerConfig string) *schema.NodeGroup {
	t.Helper()
	doc := tenant + `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: cp
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: controlplane
spec:
  count: 3
  providerClass: openstack
  providerConfig:
` + providerConfig
	d, err := schema.Load(fstest.MapFS{"t.yaml": {Data: []byte(doc)}}, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tenants[0].NodeGroups[0]
}

const good = `    cloud: mycloud
    flavor: m1.small
    image: talos-1.12.6
    networks:
      - name: tenant-net
`

func TestValidateAcceptsGood(t *testing.T) {
	if probs := (openstack.Module{}).Validate(nodeGroup(t, good)); len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
}

func TestValidateRefusesWithFileLine(t *testing.T) {
	for _, c := range []struct {
		name, config, want string
	}{
		{"unknown field", good + "    flavour: m1.large\n", `t.yaml:26:1: /spec/providerConfig/flavour: openstack providerConfig has no field "flavour"`},
		{"wrong type", strings.Replace(good, "flavor: m1.small", "flavor: 2", 1), `t.yaml:22:1: /spec/providerConfig/flavor: openstack providerConfig.flavor must be a string, not the number 2`},
		{"wrong item type", good + "    securityGroups: [default, 3]\n", `t.yaml:26:1: /spec/providerConfig/securityGroups: openstack providerConfig.securityGroups must be a list of strings`},
		{"unknown nested field", good + "        fixedIp: 10.0.0.1\n", `t.yaml:26:1: /spec/providerConfig/networks/0/fixedIp: openstack providerConfig.networks[0] has no field "fixedIp"`},
		{"missing required", strings.Replace(good, "    image: talos-1.12.6\n", "", 1), `openstack providerConfig needs the field "image"`},
		{"bad policy", good + "    serverGroupPolicy: spread\n", `t.yaml:26:1: /spec/providerConfig/serverGroupPolicy: openstack providerConfig.serverGroupPolicy "spread" is not one of`},
		{"boot volume size type", good + "    bootVolume:\n      size: \"20\"\n", `t.yaml:27:1: /spec/providerConfig/bootVolume/size: openstack providerConfig.bootVolume.size must be an integer`},
		{"name and id", good + "        id: 4d2b9f3e-0000-4000-8000-00000000000a\n", `t.yaml:25:1: /spec/providerConfig/networks/0: openstack providerConfig.networks[0] needs exactly one of name, id and ports`},
		{"too few ports", strings.Replace(good, "      - name: tenant-net\n", "      - ports: [a1, a2]\n", 1), `t.yaml:25:1: /spec/providerConfig/networks/0/ports: openstack providerConfig.networks[0].ports lists 2 ports for 3 machines`},
		{"reserved metadata", good + "    metadata:\n      rezuscloud_role: x\n", `t.yaml:26:1: /spec/providerConfig/metadata: openstack providerConfig.metadata key "rezuscloud_role"`},
		{"template in cloud", strings.Replace(good, "cloud: mycloud", "cloud: ${file(\"/etc/passwd\")}", 1), `t.yaml:21:1: /spec/providerConfig/cloud: openstack providerConfig.cloud`},
	} {
		t.Run(c.name, func(t *testing.T) {
			probs := (openstack.Module{}).Validate(nodeGroup(t, c.config))
			for _, p := range probs {
				if strings.Contains(p.String(), c.want) {
					return
				}
			}
			t.Errorf("no problem %q in %v", c.want, probs)
		})
	}
}

// A network's name alone is short for {name: NAME}: a list of names, or
// one mixing names and mappings, validates and renders exactly as the
// mappings do; a list item that is neither is refused at its file:line.
func TestNetworkNamesAreShortForMappings(t *testing.T) {
	render := func(networks string) string {
		t.Helper()
		ng := nodeGroup(t, strings.Replace(good, "      - name: tenant-net\n", networks, 1))
		if probs := (openstack.Module{}).Validate(ng); len(probs) != 0 {
			t.Fatalf("networks %q: problems %v", networks, probs)
		}
		res := (openstack.Module{}).Resources(module.MachineInput{Tenant: "acme", NodeGroup: ng, Role: schema.RoleControlPlane,
			ResourceName: "ng_cp", UserData: "${var.config}", UserDataBase64: "${base64encode(var.config)}", ConfigHash: "abc"})
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for short, long := range map[string]string{
		"      - tenant-net\n": "      - name: tenant-net\n",
		"      [tenant-net]\n": "      - name: tenant-net\n",
		"      - tenant-net\n      - id: 4d2b9f3e-0000-4000-8000-00000000000a\n        createPort: true\n      - mgmt-net\n": "      - name: tenant-net\n      - id: 4d2b9f3e-0000-4000-8000-00000000000a\n        createPort: true\n      - name: mgmt-net\n",
	} {
		if got, want := render(short), render(long); got != want {
			t.Errorf("networks\n%s renders\n%s\nwhile\n%s renders\n%s", short, got, long, want)
		}
	}
	for _, c := range []struct{ networks, want string }{
		{"      - 3\n", `t.yaml:24:1: /spec/providerConfig/networks: openstack providerConfig.networks must be a list of mappings, or of strings short for {name: …}, not a list of numbers`},
		{"      - tenant-net\n      - [a]\n", `providerConfig.networks must be a list of mappings, or of strings short for {name: …}, not a list whose item 1 is a list of strings`},
		{"      - \"\"\n", `t.yaml:25:1: /spec/providerConfig/networks/0/name: openstack providerConfig.networks[0].name must not be empty`},
	} {
		probs := (openstack.Module{}).Validate(nodeGroup(t, strings.Replace(good, "      - name: tenant-net\n", c.networks, 1)))
		if len(probs) != 1 || !strings.Contains(probs[0].String(), c.want) {
			t.Errorf("networks %q: problems %v, want one containing %q", c.networks, probs, c.want)
		}
	}
}

func TestCheckConfigNamesTheNodeGroup(t *testing.T) {
	ng := nodeGroup(t, good)
	m := openstack.Module{}
	if probs := m.CheckConfig(ng, make([]byte, 49149)); len(probs) != 0 {
		t.Fatalf("a config of 65,532 bytes in base64 was refused: %v", probs)
	}
	probs := m.CheckConfig(ng, make([]byte, 49153))
	if len(probs) != 1 || probs[0].File != "t.yaml" || probs[0].Line != 10 ||
		!strings.Contains(probs[0].Message, "node group cp") || !strings.Contains(probs[0].Message, "65540 bytes") {
		t.Fatalf("problems = %v, want one at t.yaml:10 naming node group cp and its size", probs)
	}
}

func TestExtract(t *testing.T) {
	var mp module.Mapping
	for _, m := range (openstack.Module{}).Mappings() {
		if m.TFType == openstack.TypeInstance {
			mp = m
		}
	}
	if mp.Kind != schema.KindMachine {
		t.Fatalf("no machine mapping for %s", openstack.TypeInstance)
	}
	attrs := map[string]any{
		"id": "srv-1", "name": "acme-cp-0", "flavor_name": "m1.small", "availability_zone": "nova",
		"access_ip_v4": "", "network": []any{map[string]any{"fixed_ip_v4": "127.2.0.5"}},
		"all_metadata": map[string]any{openstack.MetaTenant: "acme", openstack.MetaNodeGroup: "cp", openstack.MetaRole: "controlplane", openstack.MetaConfigHash: "abc"},
	}
	f := mp.Extract(attrs)
	want := module.MachineFacts{ProviderID: "srv-1", Address: "127.2.0.5", Hostname: "acme-cp-0", Shape: "m1.small", Zone: "nova",
		Tenant: "acme", NodeGroup: "cp", Role: "controlplane", ConfigHash: "abc"}
	if f != want {
		t.Fatalf("facts = %+v, want %+v", f, want)
	}
	attrs["access_ip_v4"] = "127.2.0.9"
	if f := mp.Extract(attrs); f.Address != "127.2.0.9" {
		t.Fatalf("access_ip_v4 not preferred: %q", f.Address)
	}
}
