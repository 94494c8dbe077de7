// Package openstack is the provider module of OpenStack clouds
// (providerClass "openstack"), through terraform-provider-openstack 3.4.0.
// It checks a node group's providerConfig, renders one
// openstack_compute_instance_v2 per machine with the ports, server group and
// boot volume the config asks for, and reads machines back from their state.
//
// Credentials never pass through it: a node group names an entry of the
// server's clouds.yaml, which the provider reads itself (its cloud argument
// and OS_CLIENT_CONFIG_FILE). It must not import render or another module.
package openstack

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Class is the providerClass of the module.
const Class = "openstack"

// Provider requirement: the version is pinned, since the rendered arguments
// were checked against this version's schema.
const (
	Source  = "terraform-provider-openstack/openstack"
	Version = "= 3.4.0"
	local   = "openstack"
)

// MaxUserData is Nova's limit on user_data, in bytes of base64.
const MaxUserData = 65535

// Metadata keys RezusCloud sets on every server; a node group's own
// metadata may not use the prefix.
const (
	MetaPrefix     = "rezuscloud_"
	MetaTenant     = MetaPrefix + "tenant"
	MetaNodeGroup  = MetaPrefix + "node_group"
	MetaRole       = MetaPrefix + "role"
	MetaConfigHash = MetaPrefix + "config_hash"
)

// Server group policies; "none" renders no server group.
var policies = []string{"anti-affinity", "soft-anti-affinity", "affinity", "soft-affinity", "none"}

// Module is the OpenStack provider module.
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
// cloud, named after it, which selects the clouds.yaml entry.
func (Module) ProviderConfig(ng *schema.NodeGroup) module.ProviderConfig {
	cloud := module.Str(ng.Spec.ProviderConfig["cloud"])
	return module.ProviderConfig{Alias: cloud, Body: map[string]any{"cloud": cloud}}
}

var (
	cloudRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)
	uuidRE  = regexp.MustCompile(`^(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	portRE  = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

func nonEmpty(v any) string {
	if strings.TrimSpace(v.(string)) == "" {
		return "must not be empty"
	}
	return ""
}

// fields is the providerConfig schema.
var fields = []module.Field{
	{Name: "cloud", Kind: module.String, Required: true, Check: func(v any) string {
		if !cloudRE.MatchString(v.(string)) {
			return fmt.Sprintf("%q must name a clouds.yaml entry of letters, digits, '-' and '_', starting with a letter", v)
		}
		return ""
	}},
	{Name: "flavor", Kind: module.String, Required: true, Check: nonEmpty},
	{Name: "image", Kind: module.String, Required: true, Check: nonEmpty},
	{Name: "networks", Kind: module.ObjectList, Short: "name", Required: true, Fields: []module.Field{
		{Name: "name", Kind: module.String, Check: nonEmpty},
		{Name: "id", Kind: module.String, Check: nonEmpty},
		{Name: "ports", Kind: module.StringList, Check: func(v any) string {
			for _, p := range module.Strings(v) {
				if !portRE.MatchString(p) {
					return fmt.Sprintf("port ID %q is not an OpenStack ID", p)
				}
			}
			return ""
		}},
		{Name: "createPort", Kind: module.Bool},
	}, Check: func(v any) string {
		if len(v.([]any)) == 0 {
			return "must list at least one network"
		}
		return ""
	}},
	{Name: "securityGroups", Kind: module.StringList},
	{Name: "availabilityZone", Kind: module.String, Check: nonEmpty},
	{Name: "keyPair", Kind: module.String, Check: nonEmpty},
	{Name: "bootVolume", Kind: module.Object, Fields: []module.Field{
		{Name: "size", Kind: module.Integer, Required: true, Check: func(v any) string {
			if module.Int(v) < 1 {
				return "must be at least 1 (GiB)"
			}
			return ""
		}},
		{Name: "type", Kind: module.String, Check: nonEmpty},
	}},
	{Name: "serverGroupPolicy", Kind: module.String, Check: func(v any) string {
		for _, p := range policies {
			if v == p {
				return ""
			}
		}
		return fmt.Sprintf("%q is not one of %s", v, strings.Join(policies, ", "))
	}},
	{Name: "metadata", Kind: module.StringMap, Check: checkMetadata},
}

func checkMetadata(v any) string {
	m := v.(map[string]any)
	if len(m) > 100 {
		return fmt.Sprintf("has %d items; Nova allows 128 in all and RezusCloud sets 4 of its own", len(m))
	}
	for k, val := range m {
		switch {
		case strings.HasPrefix(k, MetaPrefix):
			return fmt.Sprintf("key %q: the prefix %s is RezusCloud's own", k, MetaPrefix)
		case len(k) > 255 || len(val.(string)) > 255:
			return fmt.Sprintf("key %q: Nova takes keys and values of at most 255 characters", k)
		}
	}
	return ""
}

// Validate implements module.Module: the schema, then what needs more than
// one field at a time.
func (Module) Validate(ng *schema.NodeGroup) []schema.Problem {
	c := module.Checker{Class: Class, NG: ng}
	c.Check(fields)
	if len(c.Problems) > 0 {
		return c.Problems
	}
	for i, n := range networks(ng) {
		at := []string{"networks", fmt.Sprint(i)}
		set := 0
		for _, s := range []bool{n.name != "", n.id != "", n.ports != nil} {
			if s {
				set++
			}
		}
		switch {
		case set != 1:
			c.Add(at, "needs exactly one of name, id and ports")
		case n.createPort && n.ports != nil:
			c.Add(at, "createPort makes ports on a network given by name or id, not on pre-created ports")
		case n.ports != nil && len(n.ports) < ng.Spec.Count:
			c.Add(append(at, "ports"), "lists %d ports for %d machines: give one per machine", len(n.ports), ng.Spec.Count)
		}
	}
	return c.Problems
}

// CheckConfig implements module.ConfigChecker: Nova takes at most 65,535
// bytes of base64 user data.
func (Module) CheckConfig(ng *schema.NodeGroup, config []byte) []schema.Problem {
	n := base64Len(len(config))
	if n <= MaxUserData {
		return nil
	}
	return []schema.Problem{{File: ng.Source.File, Line: ng.Source.Line, Column: 1,
		Message: fmt.Sprintf("node group %s: its Talos machine config is %d bytes in base64, over Nova's limit of %d for user_data; make its config patches smaller",
			ng.Metadata.Name, n, MaxUserData)}}
}

func base64Len(n int) int { return (n + 2) / 3 * 4 }

// network is one entry of providerConfig.networks.
type network struct {
	name, id   string
	ports      []string
	createPort bool
}

// networks reads providerConfig.networks, where a network's name alone is
// short for {name: NAME}.
func networks(ng *schema.NodeGroup) []network {
	var out []network
	for _, m := range module.Items(ng.Spec.ProviderConfig["networks"], "name") {
		n := network{name: module.Str(m["name"]), id: module.Str(m["id"])}
		if p, ok := m["ports"]; ok {
			n.ports = module.Strings(p)
		}
		n.createPort, _ = m["createPort"].(bool)
		out = append(out, n)
	}
	return out
}

// policy is the node group's server group policy: its own, else
// anti-affinity for control planes and none for workers.
func policy(ng *schema.NodeGroup, role string) string {
	if p := module.Str(ng.Spec.ProviderConfig["serverGroupPolicy"]); p != "" {
		return p
	}
	if role == schema.RoleControlPlane {
		return "anti-affinity"
	}
	return "none"
}

// isID reports whether s is an OpenStack UUID rather than a name.
func isID(s string) bool { return uuidRE.MatchString(s) }
