package openstack

import (
	"fmt"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TF types the module renders.
const (
	TypeInstance    = "openstack_compute_instance_v2"
	TypePort        = "openstack_networking_port_v2"
	TypeServerGroup = "openstack_compute_servergroup_v2"
	dataNetwork     = "openstack_networking_network_v2"
	dataSecGroup    = "openstack_networking_secgroup_v2"
	dataImage       = "openstack_images_image_v2"
)

// Resources implements module.Module. For a node group named NG of tenant T
// (resource name rn) it renders:
//
//   - openstack_compute_servergroup_v2.rn, unless the policy is "none";
//   - openstack_networking_port_v2.rn_portI (count) for each network I with
//     createPort, with the security groups on the port, and the data sources
//     that look up that network and those groups by name;
//   - data.openstack_images_image_v2.rn when the machines boot from a volume
//     made from an image given by name;
//   - openstack_compute_instance_v2.rn (count), named T-NG-<index>, whose
//     user_data is the Talos config and is ignored after creation, and
//     whose metadata carries the tenant, node group, role and config hash.
func (m Module) Resources(in module.MachineInput) []module.Resource {
	ng := in.NodeGroup
	pc := ng.Spec.ProviderConfig
	provider := m.ProviderConfig(ng).Ref(local)
	rn := in.ResourceName
	base := in.Tenant + "-" + ng.Metadata.Name
	var out []module.Resource
	add := func(data bool, typ, name string, body map[string]any) {
		if provider != "" {
			body["provider"] = provider
		}
		out = append(out, module.Resource{Data: data, Type: typ, Name: name, Body: body})
	}

	instance := map[string]any{
		"count":     ng.Spec.Count,
		"name":      module.Literal(base) + "-${count.index}",
		"metadata":  metadata(in),
		"lifecycle": map[string]any{"ignore_changes": []string{"user_data"}},
	}
	if in.UserData != "" {
		instance["user_data"] = in.UserData
	}
	flavor := module.Str(pc["flavor"])
	if isID(flavor) {
		instance["flavor_id"] = flavor
	} else {
		instance["flavor_name"] = module.Literal(flavor)
	}
	if az := module.Str(pc["availabilityZone"]); az != "" {
		instance["availability_zone"] = module.Literal(az)
	}
	if kp := module.Str(pc["keyPair"]); kp != "" {
		instance["key_pair"] = module.Literal(kp)
	}
	image := module.Str(pc["image"])
	if bv, ok := pc["bootVolume"].(map[string]any); ok {
		uuid := image
		if !isID(image) {
			add(true, dataImage, rn, map[string]any{"name": module.Literal(image), "most_recent": true})
			uuid = "${data." + dataImage + "." + rn + ".id}"
		}
		bd := map[string]any{"uuid": uuid, "source_type": "image", "destination_type": "volume",
			"volume_size": module.Int(bv["size"]), "boot_index": 0, "delete_on_termination": true}
		if t := module.Str(bv["type"]); t != "" {
			bd["volume_type"] = module.Literal(t)
		}
		instance["block_device"] = []any{bd}
	} else if isID(image) {
		instance["image_id"] = image
	} else {
		instance["image_name"] = module.Literal(image)
	}
	if p := policy(ng, in.Role); p != "none" {
		add(false, TypeServerGroup, rn, map[string]any{"name": module.Literal(base), "policies": []string{p}})
		instance["scheduler_hints"] = []any{map[string]any{"group": "${" + TypeServerGroup + "." + rn + ".id}"}}
	}

	groups := module.Strings(pc["securityGroups"])
	var groupIDs []string // looked up once, for the first port made
	var nets []any
	usesPorts := false
	for i, n := range networks(ng) {
		switch {
		case n.ports != nil:
			usesPorts = true
			nets = append(nets, map[string]any{"port": "${" + hclList(n.ports) + "[count.index]}"})
		case n.createPort:
			usesPorts = true
			port := fmt.Sprintf("%s_port%d", rn, i)
			body := map[string]any{"count": ng.Spec.Count, "name": module.Literal(base) + "-${count.index}",
				"admin_state_up": true, "network_id": networkID(n, port, add)}
			if len(groups) > 0 {
				if groupIDs == nil {
					groupIDs = secGroupIDs(rn, groups, add)
				}
				body["security_group_ids"] = groupIDs
			}
			add(false, TypePort, port, body)
			nets = append(nets, map[string]any{"port": "${" + TypePort + "." + port + "[count.index].id}"})
		case n.id != "":
			nets = append(nets, map[string]any{"uuid": n.id})
		default:
			nets = append(nets, map[string]any{"name": module.Literal(n.name)})
		}
	}
	instance["network"] = nets
	if len(groups) > 0 && !usesPorts {
		lits := make([]string, len(groups))
		for i, g := range groups {
			lits[i] = module.Literal(g)
		}
		instance["security_groups"] = lits
	}
	add(false, TypeInstance, rn, instance)
	return out
}

// metadata is the node group's metadata plus RezusCloud's own keys.
func metadata(in module.MachineInput) map[string]any {
	md := map[string]any{
		MetaTenant:     in.Tenant,
		MetaNodeGroup:  in.NodeGroup.Metadata.Name,
		MetaRole:       in.Role,
		MetaConfigHash: in.ConfigHash,
	}
	if own, ok := in.NodeGroup.Spec.ProviderConfig["metadata"].(map[string]any); ok {
		for k, v := range own {
			md[k] = module.Literal(module.Str(v))
		}
	}
	return md
}

// networkID is the network_id of a port on network n: its ID, or that of a
// data source looking it up by name.
func networkID(n network, name string, add func(bool, string, string, map[string]any)) string {
	if n.id != "" {
		return n.id
	}
	add(true, dataNetwork, name, map[string]any{"name": module.Literal(n.name)})
	return "${data." + dataNetwork + "." + name + ".id}"
}

// secGroupIDs looks the security groups up by name (once per node group)
// and returns their IDs as references.
func secGroupIDs(rn string, groups []string, add func(bool, string, string, map[string]any)) []string {
	var ids []string
	for i, g := range groups {
		name := fmt.Sprintf("%s_sg%d", rn, i)
		add(true, dataSecGroup, name, map[string]any{"name": module.Literal(g)})
		ids = append(ids, "${data."+dataSecGroup+"."+name+".id}")
	}
	return ids
}

// hclList writes IDs (checked to be letters, digits and '-') as an HCL
// list literal.
func hclList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = `"` + id + `"`
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Mappings implements module.Module: instances are machines.
func (Module) Mappings() []module.Mapping {
	return []module.Mapping{{TFType: TypeInstance, Kind: schema.KindMachine, Extract: extract}}
}

// extract reads a machine from an instance's state: the management address
// is access_ip_v4, else the first fixed IP.
func extract(a map[string]any) module.MachineFacts {
	md, _ := a["all_metadata"].(map[string]any)
	if len(md) == 0 {
		md, _ = a["metadata"].(map[string]any)
	}
	addr := module.Str(a["access_ip_v4"])
	if nets, ok := a["network"].([]any); ok && addr == "" && len(nets) > 0 {
		if n, ok := nets[0].(map[string]any); ok {
			addr = module.Str(n["fixed_ip_v4"])
		}
	}
	return module.MachineFacts{
		ProviderID: module.Str(a["id"]),
		Address:    addr,
		Hostname:   module.Str(a["name"]),
		Shape:      module.Str(a["flavor_name"]),
		Image:      module.Str(a["image_name"]),
		Zone:       module.Str(a["availability_zone"]),
		Tenant:     module.Str(md[MetaTenant]),
		NodeGroup:  module.Str(md[MetaNodeGroup]),
		Role:       module.Str(md[MetaRole]),
		ConfigHash: module.Str(md[MetaConfigHash]),
	}
}
