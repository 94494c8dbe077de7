package oci_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/render/provider/oci"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The oracle/oci provider cannot be installed here, so what the module
// renders is checked against the arguments of oci_core_instance as the
// provider's source (8.28.0) declares them: name -> type. Types are
// "string", "number", "bool", "list" (of strings), "map" (of strings) and
// "block" (nested block, with its own table in instanceBlocks).
var instanceArgs = map[string]string{
	"availability_domain": "string", "compartment_id": "string", "shape": "string", "display_name": "string",
	"fault_domain": "string", "metadata": "map", "extended_metadata": "map", "freeform_tags": "map",
	"defined_tags": "map", "state": "string", "preserve_boot_volume": "bool", "subnet_id": "string",
	"hostname_label": "string", "image": "string", "ipxe_script": "string", "is_pv_encryption_in_transit_enabled": "bool",
	"shape_config": "block", "source_details": "block", "create_vnic_details": "block",
	// meta-arguments of every resource
	"count": "number", "provider": "string", "lifecycle": "meta", "depends_on": "meta",
}

var instanceBlocks = map[string]map[string]string{
	"shape_config": {"ocpus": "number", "memory_in_gbs": "number", "vcpus": "number", "baseline_ocpu_utilization": "string",
		"nvmes": "number", "local_volume_size_in_gbs": "number"},
	"source_details": {"source_type": "string", "source_id": "string", "boot_volume_size_in_gbs": "string",
		"boot_volume_vpus_per_gb": "string", "kms_key_id": "string", "is_preserve_boot_volume_enabled": "bool"},
	"create_vnic_details": {"subnet_id": "string", "assign_public_ip": "string", "private_ip": "string",
		"hostname_label": "string", "nsg_ids": "list", "display_name": "string", "assign_private_dns_record": "bool",
		"skip_source_dest_check": "bool", "freeform_tags": "map", "defined_tags": "map", "vlan_id": "string"},
}

var requiredArgs = []string{"availability_domain", "compartment_id", "shape"}

// checkAgainstSchema reports every argument of body that the table does not
// know or whose value has the wrong type.
func checkAgainstSchema(body map[string]any, table map[string]string, at string) []string {
	var bad []string
	for k, v := range body {
		typ, ok := table[k]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s%s: unknown argument", at, k))
			continue
		}
		ok = true
		switch typ {
		case "string":
			_, ok = v.(string)
		case "number":
			switch v.(type) {
			case int, float64:
			default:
				ok = false
			}
		case "bool":
			_, ok = v.(bool)
		case "list":
			_, ok = v.([]string)
			if l, isList := v.([]any); isList {
				ok = true
				for _, e := range l {
					if _, s := e.(string); !s {
						ok = false
					}
				}
			}
		case "map":
			m, isMap := v.(map[string]any)
			ok = isMap
			for _, e := range m {
				if _, s := e.(string); !s {
					ok = false
				}
			}
		case "block":
			l, isList := v.([]any)
			ok = isList && len(l) == 1
			if ok {
				bad = append(bad, checkAgainstSchema(l[0].(map[string]any), instanceBlocks[k], at+k+".")...)
			}
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("%s%s: %T is not a %s", at, k, v, typ))
		}
	}
	return bad
}

const doc = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: acme
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://acme.example.internal:6443
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: cp
  labels:
    rezuscloud.io/tenant: acme
    rezuscloud.io/role: controlplane
spec:
  count: 3
  providerClass: oci
  providerConfig:
    profile: DEFAULT
    compartmentId: ocid1.compartment.oc1..aaaaexample
    availabilityDomain: Uocm:EU-FRANKFURT-1-AD-1
    shape: VM.Standard.E5.Flex
    shapeConfig:
      ocpus: 2
      memoryInGBs: 8.5
    image: ocid1.image.oc1.eu-frankfurt-1.aaaaexample
    subnetId: ocid1.subnet.oc1.eu-frankfurt-1.aaaaexample
    assignPublicIp: true
    bootVolumeSizeInGBs: 60
    nsgIds: [ocid1.networksecuritygroup.oc1.eu-frankfurt-1.aaaaexample]
    faultDomain: FAULT-DOMAIN-2
`

func load(t *testing.T, text string) *schema.NodeGroup {
	t.Helper()
	d, err := schema.Load(fstest.MapFS{"t.yaml": {Data: []byte(text)}}, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tenants[0].NodeGroups[0]
}

func TestResourcesMatchTheProviderSchema(t *testing.T) {
	ng := load(t, doc)
	m := oci.Module{}
	if probs := m.Validate(ng); len(probs) > 0 {
		t.Fatalf("valid config refused: %v", probs)
	}
	res := m.Resources(module.MachineInput{Tenant: "acme", NodeGroup: ng, Role: "controlplane", ResourceName: "ng_cp",
		UserData: "machine: {}", UserDataBase64: "bWFjaGluZToge30=", ConfigHash: "abc"})
	if len(res) != 1 || res[0].Type != oci.TypeInstance {
		t.Fatalf("resources = %+v", res)
	}
	body := res[0].Body
	if bad := checkAgainstSchema(body, instanceArgs, ""); len(bad) > 0 {
		t.Fatalf("not in the provider's schema: %v", bad)
	}
	for _, r := range requiredArgs {
		if _, ok := body[r]; !ok {
			t.Errorf("required argument %s missing", r)
		}
	}
	vnic := body["create_vnic_details"].([]any)[0].(map[string]any)
	src := body["source_details"].([]any)[0].(map[string]any)
	md := body["metadata"].(map[string]any)
	for what, c := range map[string]bool{
		`assign_public_ip is the string "true"`:      vnic["assign_public_ip"] == "true",
		`boot_volume_size_in_gbs is the string "60"`: src["boot_volume_size_in_gbs"] == "60",
		"metadata.user_data is the base64 config":    md["user_data"] == "bWFjaGluZToge30=",
		"the config hash is in metadata":             md[oci.MetaConfigHash] == "abc",
		"ignore_changes covers metadata.user_data":   fmt.Sprint(body["lifecycle"]) == `map[ignore_changes:[metadata["user_data"]]]`,
		"the profile's provider configuration":       body["provider"] == "oci.DEFAULT",
		"memory_in_gbs keeps its fraction":           body["shape_config"].([]any)[0].(map[string]any)["memory_in_gbs"] == 8.5,
	} {
		if !c {
			t.Errorf("%s: body %v", what, body)
		}
	}
	// The table can fail: an argument the provider does not have.
	body["user_data"] = "x"
	if bad := checkAgainstSchema(body, instanceArgs, ""); len(bad) != 1 {
		t.Errorf("an unknown argument passed the schema table: %v", bad)
	}
}

// TestGoldenMatchesTheProviderSchema checks the OCI golden workspace of
// render's tests against the same table.
func TestGoldenMatchesTheProviderSchema(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "oci-prod.tf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Terraform struct {
			RequiredProviders map[string]map[string]string `json:"required_providers"`
		} `json:"terraform"`
		Provider map[string][]map[string]any          `json:"provider"`
		Resource map[string]map[string]map[string]any `json:"resource"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Terraform.RequiredProviders["oci"]; got["source"] != oci.Source || got["version"] != oci.Version {
		t.Errorf("required_providers.oci = %v", got)
	}
	if p := doc.Provider["oci"]; len(p) != 1 || p[0]["alias"] != "DEFAULT" || p[0]["config_file_profile"] != "DEFAULT" || len(p[0]) != 2 {
		t.Errorf("provider.oci = %v, want one block for profile DEFAULT and nothing else", p)
	}
	instances := doc.Resource[oci.TypeInstance]
	if len(instances) != 2 {
		t.Fatalf("golden has %d instances, want 2", len(instances))
	}
	for name, body := range instances {
		if bad := checkAgainstSchema(body, instanceArgs, name+"."); len(bad) > 0 {
			t.Errorf("not in the provider's schema: %v", bad)
		}
	}
}

func TestValidateRefusesWithFileLine(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"unknown field", "    faultDomain: FAULT-DOMAIN-2\n", "    faultDomain: FAULT-DOMAIN-2\n    sshKeys: x\n", `t.yaml:34:1: /spec/providerConfig/sshKeys: oci providerConfig has no field "sshKeys"`},
		{"wrong type", "assignPublicIp: true", `assignPublicIp: "true"`, `t.yaml:30:1: /spec/providerConfig/assignPublicIp: oci providerConfig.assignPublicIp must be true or false, not the string "true"`},
		{"boot volume too small", "bootVolumeSizeInGBs: 60", "bootVolumeSizeInGBs: 47", `t.yaml:31:1: /spec/providerConfig/bootVolumeSizeInGBs: oci providerConfig.bootVolumeSizeInGBs is 47`},
		{"not an image OCID", "image: ocid1.image.", "image: ocid1.subnet.", `t.yaml:28:1: /spec/providerConfig/image: oci providerConfig.image "ocid1.subnet.oc1.eu-frankfurt-1.aaaaexample" is not an OCID of type image`},
		{"ocpus as text", "ocpus: 2", "ocpus: two", `t.yaml:26:1: /spec/providerConfig/shapeConfig/ocpus: oci providerConfig.shapeConfig.ocpus must be a number`},
		{"flex without shapeConfig", "    shapeConfig:\n      ocpus: 2\n      memoryInGBs: 8.5\n", "", `t.yaml:24:1: /spec/providerConfig/shape: oci providerConfig.shape is a flexible shape`},
	} {
		t.Run(c.name, func(t *testing.T) {
			probs := (oci.Module{}).Validate(load(t, strings.Replace(doc, c.from, c.to, 1)))
			for _, p := range probs {
				if strings.Contains(p.String(), c.want) {
					return
				}
			}
			t.Errorf("no problem %q in %v", c.want, probs)
		})
	}
}

func TestCheckConfigMetadataLimit(t *testing.T) {
	ng := load(t, doc)
	m := oci.Module{}
	if probs := m.CheckConfig(ng, make([]byte, 23000)); len(probs) != 0 {
		t.Fatalf("a config of 30,668 bytes in base64 was refused: %v", probs)
	}
	probs := m.CheckConfig(ng, make([]byte, 24000))
	if len(probs) != 1 || probs[0].File != "t.yaml" || probs[0].Line != 10 || !strings.Contains(probs[0].Message, "node group cp") ||
		!strings.Contains(probs[0].Message, "32000") {
		t.Fatalf("problems = %v, want one at t.yaml:10 naming node group cp and the limit", probs)
	}
}

func TestExtract(t *testing.T) {
	mps := (oci.Module{}).Mappings()
	if len(mps) != 1 || mps[0].TFType != oci.TypeInstance || mps[0].Kind != schema.KindMachine {
		t.Fatalf("mappings = %+v", mps)
	}
	f := mps[0].Extract(map[string]any{
		"id": "ocid1.instance.oc1.r.aaaa", "private_ip": "10.0.0.5", "public_ip": "203.0.113.9", "display_name": "acme-cp-0",
		"shape": "VM.Standard.E5.Flex", "availability_domain": "AD-1", "state": "RUNNING",
		"metadata": map[string]any{oci.MetaTenant: "acme", oci.MetaNodeGroup: "cp", oci.MetaRole: "controlplane", oci.MetaConfigHash: "abc", "user_data": "eA=="},
	})
	want := module.MachineFacts{ProviderID: "ocid1.instance.oc1.r.aaaa", Address: "10.0.0.5", PublicAddress: "203.0.113.9",
		Hostname: "acme-cp-0", Shape: "VM.Standard.E5.Flex", Zone: "AD-1", State: "RUNNING",
		Tenant: "acme", NodeGroup: "cp", Role: "controlplane", ConfigHash: "abc"}
	if f != want {
		t.Fatalf("facts = %+v, want %+v", f, want)
	}
}
