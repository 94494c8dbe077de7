// Package oci is the provider module of Oracle Cloud Infrastructure
// (providerClass "oci"), through the oracle/oci provider. It checks a node
// group's providerConfig, renders one oci_core_instance per machine whose
// metadata.user_data is the base64 Talos config, and reads machines back
// from their state.
//
// Credentials never pass through it: a node group names a profile of the
// server's OCI config file, which the provider reads itself
// (config_file_profile). The provider is not installable on the machines
// RezusCloud is built on, so what this module renders is checked against the
// provider's schema as recorded from its source, not applied. It must not
// import render or another module.
package oci

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Class is the providerClass of the module.
const Class = "oci"

// Provider requirement. 8.28.0 is the newest release whose oci_core_instance
// schema this module was written against (from the provider's source): the
// string-typed assign_public_ip and boot_volume_size_in_gbs, the float
// shape_config fields and the 32,000-byte metadata limit. Pinning it keeps a
// later release from changing what a render means.
const (
	Source  = "oracle/oci"
	Version = "= 8.28.0"
	local   = "oci"
)

// MaxMetadata is OCI's limit on an instance's metadata and
// extended_metadata together, in bytes of keys and values.
const MaxMetadata = 32000

// TypeInstance is the TF type of a machine.
const TypeInstance = "oci_core_instance"

// Metadata keys RezusCloud sets; UserData holds the base64 Talos config.
const (
	MetaUserData   = "user_data"
	MetaPrefix     = "rezuscloud_"
	MetaTenant     = MetaPrefix + "tenant"
	MetaNodeGroup  = MetaPrefix + "node_group"
	MetaRole       = MetaPrefix + "role"
	MetaConfigHash = MetaPrefix + "config_hash"
)

// Module is the OCI provider module.
type Module struct{}

var (
	_ module.Module        = Module{}
	_ module.ConfigChecker = Module{}
)

// Name implements module.Module.
func (Module) Name() string { return Class }

// Provider implements module.Module.
func (Module) Provider() module.Provider {
	return module.Provider{LocalName: local, Source: Source, Version: Version}
}

// ProviderConfig implements module.Module: one aliased configuration per
// profile of the OCI config file.
func (Module) ProviderConfig(ng *schema.NodeGroup) module.ProviderConfig {
	p := module.Str(ng.Spec.ProviderConfig["profile"])
	return module.ProviderConfig{Alias: p, Body: map[string]any{"config_file_profile": p}}
}

var (
	profileRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)
	ocidRE    = regexp.MustCompile(`^ocid1\.([a-z0-9]+)\.[a-z0-9-]*\.[a-z0-9-]*\.[a-z0-9._-]+$`)
	faultRE   = regexp.MustCompile(`^FAULT-DOMAIN-[1-3]$`)
)

// ocid checks a string is an OCID of one of the resource types.
func ocid(types ...string) func(v any) string {
	return func(v any) string {
		m := ocidRE.FindStringSubmatch(v.(string))
		if m != nil {
			for _, t := range types {
				if m[1] == t {
					return ""
				}
			}
		}
		return fmt.Sprintf("%q is not an OCID of type %s", v, strings.Join(types, " or "))
	}
}

func positive(v any) string {
	if v.(float64) <= 0 {
		return "must be greater than 0"
	}
	return ""
}

// fields is the providerConfig schema.
var fields = []module.Field{
	{Name: "profile", Kind: module.String, Required: true, Check: func(v any) string {
		if !profileRE.MatchString(v.(string)) {
			return fmt.Sprintf("%q must name a profile of the OCI config file: letters, digits, '-' and '_', starting with a letter", v)
		}
		return ""
	}},
	{Name: "compartmentId", Kind: module.String, Required: true, Check: ocid("compartment", "tenancy")},
	{Name: "availabilityDomain", Kind: module.String, Required: true, Check: func(v any) string {
		if strings.TrimSpace(v.(string)) == "" {
			return "must not be empty"
		}
		return ""
	}},
	{Name: "shape", Kind: module.String, Required: true, Check: func(v any) string {
		if !strings.Contains(v.(string), ".") {
			return fmt.Sprintf("%q is not an OCI shape such as VM.Standard.E5.Flex", v)
		}
		return ""
	}},
	{Name: "shapeConfig", Kind: module.Object, Fields: []module.Field{
		{Name: "ocpus", Kind: module.Number, Check: positive},
		{Name: "memoryInGBs", Kind: module.Number, Check: positive},
	}},
	{Name: "image", Kind: module.String, Required: true, Check: ocid("image")},
	{Name: "subnetId", Kind: module.String, Required: true, Check: ocid("subnet")},
	{Name: "assignPublicIp", Kind: module.Bool},
	{Name: "bootVolumeSizeInGBs", Kind: module.Integer, Check: func(v any) string {
		if n := module.Int(v); n < 50 || n > 32768 {
			return fmt.Sprintf("is %d: OCI boot volumes are 50 to 32768 GB", n)
		}
		return ""
	}},
	{Name: "nsgIds", Kind: module.StringList, Check: func(v any) string {
		for _, id := range module.Strings(v) {
			if msg := ocid("networksecuritygroup")(id); msg != "" {
				return msg
			}
		}
		return ""
	}},
	{Name: "faultDomain", Kind: module.String, Check: func(v any) string {
		if !faultRE.MatchString(v.(string)) {
			return fmt.Sprintf("%q is not one of FAULT-DOMAIN-1, FAULT-DOMAIN-2, FAULT-DOMAIN-3", v)
		}
		return ""
	}},
}

// Validate implements module.Module.
func (Module) Validate(ng *schema.NodeGroup) []schema.Problem {
	c := module.Checker{Class: Class, NG: ng}
	c.Check(fields)
	if len(c.Problems) == 0 && strings.HasSuffix(module.Str(ng.Spec.ProviderConfig["shape"]), ".Flex") {
		if _, ok := ng.Spec.ProviderConfig["shapeConfig"]; !ok {
			c.Add([]string{"shape"}, "is a flexible shape: give shapeConfig.ocpus and shapeConfig.memoryInGBs")
		}
	}
	return c.Problems
}

// CheckConfig implements module.ConfigChecker: the metadata RezusCloud
// renders, the base64 config included, must stay within OCI's 32,000
// bytes.
func (Module) CheckConfig(ng *schema.NodeGroup, config []byte) []schema.Problem {
	in := module.MachineInput{Tenant: ng.Tenant(), NodeGroup: ng, Role: ng.Role(), ConfigHash: strings.Repeat("0", 64)}
	n := len(MetaUserData) + (len(config)+2)/3*4
	for k, v := range metadata(in) {
		if k != MetaUserData {
			n += len(k) + len(v.(string))
		}
	}
	if n <= MaxMetadata {
		return nil
	}
	return []schema.Problem{{File: ng.Source.File, Line: ng.Source.Line, Column: 1,
		Message: fmt.Sprintf("node group %s: its instance metadata, with the base64 Talos machine config as user_data, is %d bytes, over OCI's limit of %d; make its config patches smaller",
			ng.Metadata.Name, n, MaxMetadata)}}
}

// metadata is what every instance of the node group carries.
func metadata(in module.MachineInput) map[string]any {
	md := map[string]any{
		MetaTenant:     in.Tenant,
		MetaNodeGroup:  in.NodeGroup.Metadata.Name,
		MetaRole:       in.Role,
		MetaConfigHash: in.ConfigHash,
	}
	if in.UserDataBase64 != "" {
		md[MetaUserData] = in.UserDataBase64
	}
	return md
}

// Resources implements module.Module: one oci_core_instance with a count,
// named T-NG-<index>, whose metadata.user_data is ignored after creation.
func (m Module) Resources(in module.MachineInput) []module.Resource {
	ng := in.NodeGroup
	pc := ng.Spec.ProviderConfig
	vnic := map[string]any{"subnet_id": module.Str(pc["subnetId"])}
	if v, ok := pc["assignPublicIp"].(bool); ok {
		vnic["assign_public_ip"] = strconv.FormatBool(v)
	}
	if ids, ok := pc["nsgIds"]; ok {
		vnic["nsg_ids"] = module.Strings(ids)
	}
	source := map[string]any{"source_type": "image", "source_id": module.Str(pc["image"])}
	if _, ok := pc["bootVolumeSizeInGBs"]; ok {
		source["boot_volume_size_in_gbs"] = strconv.Itoa(module.Int(pc["bootVolumeSizeInGBs"]))
	}
	body := map[string]any{
		"count":               ng.Spec.Count,
		"display_name":        module.Literal(in.Tenant+"-"+ng.Metadata.Name) + "-${count.index}",
		"availability_domain": module.Literal(module.Str(pc["availabilityDomain"])),
		"compartment_id":      module.Str(pc["compartmentId"]),
		"shape":               module.Literal(module.Str(pc["shape"])),
		"source_details":      []any{source},
		"create_vnic_details": []any{vnic},
		"metadata":            metadata(in),
		"lifecycle":           map[string]any{"ignore_changes": []string{`metadata["user_data"]`}},
	}
	if sc, ok := pc["shapeConfig"].(map[string]any); ok {
		cfg := map[string]any{}
		if v, ok := sc["ocpus"]; ok {
			cfg["ocpus"] = v
		}
		if v, ok := sc["memoryInGBs"]; ok {
			cfg["memory_in_gbs"] = v
		}
		body["shape_config"] = []any{cfg}
	}
	if fd := module.Str(pc["faultDomain"]); fd != "" {
		body["fault_domain"] = fd
	}
	if ref := m.ProviderConfig(ng).Ref(local); ref != "" {
		body["provider"] = ref
	}
	return []module.Resource{{Type: TypeInstance, Name: in.ResourceName, Body: body}}
}

// Mappings implements module.Module: instances are machines.
func (Module) Mappings() []module.Mapping {
	return []module.Mapping{{TFType: TypeInstance, Kind: schema.KindMachine, Extract: extract}}
}

// extract reads a machine from an instance's state. The management address
// is the private IP; the public one, when assigned, is reported beside it.
func extract(a map[string]any) module.MachineFacts {
	md, _ := a["metadata"].(map[string]any)
	return module.MachineFacts{
		ProviderID:    module.Str(a["id"]),
		Address:       module.Str(a["private_ip"]),
		PublicAddress: module.Str(a["public_ip"]),
		Hostname:      module.Str(a["display_name"]),
		Shape:         module.Str(a["shape"]),
		Zone:          module.Str(a["availability_domain"]),
		State:         module.Str(a["state"]),
		Tenant:        module.Str(md[MetaTenant]),
		NodeGroup:     module.Str(md[MetaNodeGroup]),
		Role:          module.Str(md[MetaRole]),
		ConfigHash:    module.Str(md[MetaConfigHash]),
	}
}
