package metal_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/schema"
)

const tenant = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: lab
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://lab.example.internal:6443
---
`

// nodeGroup loads one metal node group of count machines (its
// providerConfig key is line 20 of t.yaml, machines line 21).
func nodeGroup(t *testing.T, count int, providerConfig string) *schema.NodeGroup {
	t.Helper()
	doc := tenant + `apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: cp
  labels:
    rezuscloud.io/tenant: lab
    rezuscloud.io/role: controlplane
spec:
  count: ` + string(rune('0'+count)) + `
  providerClass: metal
  providerConfig:
` + providerConfig
	d, err := schema.Load(fstest.MapFS{"t.yaml": {Data: []byte(doc)}}, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tenants[0].NodeGroups[0]
}

const good = `    machines:
      - address: 127.3.0.1
        hostname: cp-1
      - address: 127.3.0.2
        installDisk: /dev/nvme0n1
        fingerprint: 9tDUR2QTrDwvR9wUpjL6JuojzFc59q9dp3Y8aNs4Gho=
      - address: 127.3.0.3
`

// loopback is the module as tests and the metal demo run it: their
// simulated machines listen on loopback addresses.
var loopback = metal.Module{AllowLoopback: true}

func TestValidateAcceptsGood(t *testing.T) {
	if probs := loopback.Validate(nodeGroup(t, 3, good)); len(probs) != 0 {
		t.Fatalf("problems: %v", probs)
	}
}

func TestValidateRefusesWithFileLine(t *testing.T) {
	for _, c := range []struct {
		name, config, want string
		count              int
	}{
		{"no machines", "    installDisk: /dev/sda\n", `metal providerConfig needs the field "machines"`, 3},
		{"not an address", strings.Replace(good, "127.3.0.3", "node-3.lab", 1), `t.yaml:27:1: /spec/providerConfig/machines/2/address: metal providerConfig.machines[2].address "node-3.lab" is not an IP address`, 3},
		{"no address", strings.Replace(good, "      - address: 127.3.0.3\n", "      - hostname: cp-3\n", 1), `t.yaml:27:1: /spec/providerConfig/machines/2: metal providerConfig.machines[2] needs the field "address"`, 3},
		{"bad hostname", strings.Replace(good, "cp-1", "CP_1", 1), `t.yaml:23:1: /spec/providerConfig/machines/0/hostname: metal providerConfig.machines[0].hostname "CP_1" is not a host name`, 3},
		{"bad disk", strings.Replace(good, "/dev/nvme0n1", "nvme0n1", 1), `t.yaml:25:1: /spec/providerConfig/machines/1/installDisk: metal providerConfig.machines[1].installDisk "nvme0n1" is not a device path`, 3},
		{"bad fingerprint", strings.Replace(good, "9tDUR2QTrDwvR9wUpjL6JuojzFc59q9dp3Y8aNs4Gho=", "ab:cd", 1), `t.yaml:26:1: /spec/providerConfig/machines/1/fingerprint: metal providerConfig.machines[1].fingerprint "ab:cd" is not a certificate fingerprint`, 3},
		{"twice", strings.Replace(good, "127.3.0.3", "127.3.0.1", 1), `t.yaml:21:1: /spec/providerConfig/machines: metal providerConfig.machines lists address 127.3.0.1 twice (machines 0 and 2)`, 3},
		{"unknown field", good + "    disk: /dev/sda\n", `t.yaml:28:1: /spec/providerConfig/disk: metal providerConfig has no field "disk" (known: installDisk, machines)`, 3},
		{"count beyond the list", good, `t.yaml:21:1: /spec/providerConfig/machines: metal providerConfig.machines lists 3 machines for count 4`, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			probs := loopback.Validate(nodeGroup(t, c.count, c.config))
			for _, p := range probs {
				if strings.Contains(p.String(), c.want) {
					return
				}
			}
			t.Fatalf("problems %v, want one containing %q", probs, c.want)
		})
	}
}

// An address that names no one machine the server reaches over a network
// is refused at its file:line, in both families and in IPv4-mapped form; a
// loopback address only without AllowLoopback.
func TestValidateRefusesAddressesOfNoMachine(t *testing.T) {
	for _, c := range []struct {
		address, want string
		loopbackOK    bool
	}{
		{"0.0.0.0", "is the unspecified address", false},
		{"::", "is the unspecified address", false},
		{"::ffff:0.0.0.0", "is the unspecified address", false},
		{"255.255.255.255", "is the broadcast address", false},
		{"224.0.0.1", "is a multicast address", false},
		{"239.1.2.3", "is a multicast address", false},
		{"ff02::1", "is a multicast address", false},
		{"169.254.10.1", "is a link-local address", false},
		{"fe80::1", "is a link-local address", false},
		{"127.3.0.3", "is a loopback address, this server's own", true},
		{"127.0.0.1", "is a loopback address", true},
		{"::1", "is a loopback address", true},
		{"::ffff:127.0.0.1", "is a loopback address", true},
	} {
		t.Run(c.address, func(t *testing.T) {
			ng := nodeGroup(t, 3, strings.Replace(good, "address: 127.3.0.3", "address: \""+c.address+"\"", 1))
			want := `t.yaml:27:1: /spec/providerConfig/machines/2/address: metal providerConfig.machines[2].address "` + c.address + `" ` + c.want
			for _, m := range []metal.Module{{}, loopback} {
				var probs []string
				for _, p := range m.Validate(ng) {
					if strings.Contains(p.String(), "/machines/2/") {
						probs = append(probs, p.String())
					}
				}
				switch {
				case m.AllowLoopback && c.loopbackOK:
					if len(probs) != 0 {
						t.Errorf("with AllowLoopback: %v", probs)
					}
				case len(probs) != 1 || !strings.HasPrefix(probs[0], want):
					t.Errorf("AllowLoopback %t: problems %v, want one starting %q", m.AllowLoopback, probs, want)
				}
			}
		})
	}
	// A routable address is fine either way (it is never dialled here).
	for _, a := range []string{"10.20.0.5", "2001:db8::5"} {
		ng := nodeGroup(t, 3, strings.Replace(good, "address: 127.3.0.3", "address: \""+a+"\"", 1))
		for _, p := range (metal.Module{}).Validate(ng) {
			if strings.Contains(p.String(), "/machines/2/") {
				t.Errorf("%s: %s", a, p)
			}
		}
	}
}

// TestResourcesAndMapping renders the first count machines as
// terraform_data records keyed by address and reads them back from state
// attributes shaped as tofu writes them; the tenant's secrets, also a
// terraform_data, are no machine.
func TestResourcesAndMapping(t *testing.T) {
	ng := nodeGroup(t, 2, good)
	res := (metal.Module{}).Resources(module.MachineInput{Tenant: "lab", NodeGroup: ng, Role: "controlplane",
		ResourceName: "ng_cp", ConfigHash: "abc123"})
	if len(res) != 1 || res[0].Type != "terraform_data" || res[0].Name != "ng_cp" || res[0].Body["input"] != "${each.value}" {
		t.Fatalf("resources: %+v", res)
	}
	each := res[0].Body["for_each"].(map[string]any)
	if len(each) != 2 || each["127.3.0.3"] != nil {
		t.Fatalf("for_each holds %v, want the first 2 machines", each)
	}
	second := each["127.3.0.2"].(map[string]any)
	if second["install_disk"] != "/dev/nvme0n1" || second["index"] != 1 || second["config_hash"] != "abc123" {
		t.Errorf("second machine: %v", second)
	}
	if first := each["127.3.0.1"].(map[string]any); first["install_disk"] != metal.DefaultInstallDisk || first["hostname"] != "cp-1" {
		t.Errorf("first machine: %v", first)
	}

	// Through JSON, as state holds it.
	b, _ := json.Marshal(map[string]any{"id": "5e1c7a44-0000-4000-8000-000000000001", "input": second})
	var attrs map[string]any
	if err := json.Unmarshal(b, &attrs); err != nil {
		t.Fatal(err)
	}
	mp := (metal.Module{}).Mappings()[0]
	f := mp.Extract(attrs)
	if f.ProviderID != "5e1c7a44-0000-4000-8000-000000000001" || f.Address != "127.3.0.2" || f.NodeGroup != "cp" ||
		f.Role != "controlplane" || f.ConfigHash != "abc123" || f.Index == nil || *f.Index != 1 {
		t.Errorf("facts: %+v", f)
	}
	if f := mp.Extract(map[string]any{"id": "x", "input": "secrets bundle"}); f.ProviderID != "" {
		t.Errorf("the secrets record became a machine: %+v", f)
	}
}
