// Package metal is the provider module of bare metal (providerClass
// "metal"): machines that exist already and that a node group lists by
// address. tofu creates nothing for them; it records each listed machine in
// state as a terraform_data, keyed by address, whose input holds the
// address, the machine's own settings and the config hash, so that TF
// state stays the source of truth of which machines a tenant has and the
// projection reads them back as it does cloud instances. The Talos plane
// gives each machine its config in maintenance mode and resets the
// machines a node group no longer lists.
//
// It must not import render or another module.
package metal

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/siderolabs/crypto/x509"

	"github.com/rezuscloud/rezuscloud/render/module"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Class is the providerClass of the module.
const Class = schema.ProviderMetal

// TypeMachine is the TF type of a machine's record: tofu's built-in
// terraform_data.
const TypeMachine = "terraform_data"

// DefaultInstallDisk is the disk Talos installs to when neither the node
// group nor the machine names one.
const DefaultInstallDisk = "/dev/sda"

// Module is the bare-metal provider module. Its providerConfig takes:
//
//	machines:             the machines, in order; the first count are used
//	  - address: 127.3.0.1            the machine's IP (required)
//	    hostname: cp-1                a static host name (optional)
//	    installDisk: /dev/nvme0n1     overrides the group's (optional)
//	    fingerprint: <SPKI sha256>    pins the maintenance certificate (optional)
//	installDisk: /dev/sda             the group's install disk (default /dev/sda)
//
// An address must name one machine that the server reaches over a network:
// the unspecified, broadcast, multicast and link-local addresses are
// refused, and so are loopback addresses unless AllowLoopback is set.
type Module struct {
	// AllowLoopback accepts machines at loopback addresses (127.0.0.0/8,
	// ::1): the simulated machines of the tests and of the metal demo
	// listen there. A real machine never does, and whatever answers on
	// the server's own loopback would receive the tenant's config.
	AllowLoopback bool
}

var (
	_ module.Module    = Module{}
	_ module.Installer = Module{}
)

// Name implements module.Module.
func (Module) Name() string { return Class }

// Provider implements module.Module: terraform_data is built into tofu.
func (Module) Provider() module.Provider {
	return module.Provider{LocalName: "terraform", Source: "terraform.io/builtin/terraform", Builtin: true}
}

// ProviderConfig implements module.Module: there is no provider block.
func (Module) ProviderConfig(*schema.NodeGroup) module.ProviderConfig {
	return module.ProviderConfig{}
}

// InstallDisk implements module.Installer: the group's installDisk, else
// DefaultInstallDisk.
func (Module) InstallDisk(ng *schema.NodeGroup) string {
	if d := module.Str(ng.Spec.ProviderConfig["installDisk"]); d != "" {
		return d
	}
	return DefaultInstallDisk
}

var (
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	diskRE     = regexp.MustCompile(`^/dev/[A-Za-z0-9/_.-]+$`)
)

// broadcast is the IPv4 limited broadcast address.
var broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// checkAddress refuses what is not the address of one machine reachable
// over a network, and loopback addresses unless allowLoopback.
func checkAddress(allowLoopback bool) func(v any) string {
	return func(v any) string {
		a, err := netip.ParseAddr(v.(string))
		if err != nil || a.Zone() != "" {
			return fmt.Sprintf("%q is not an IP address", v)
		}
		switch a = a.Unmap(); {
		case a.IsUnspecified():
			return fmt.Sprintf("%q is the unspecified address, not a machine's: give the address its Talos API answers on", v)
		case a == broadcast:
			return fmt.Sprintf("%q is the broadcast address, not a machine's: give the address its Talos API answers on", v)
		case a.IsMulticast():
			return fmt.Sprintf("%q is a multicast address, not a machine's: give the address its Talos API answers on", v)
		case a.IsLinkLocalUnicast():
			return fmt.Sprintf("%q is a link-local address, which names no one machine across links: give an address the server routes to", v)
		case a.IsLoopback() && !allowLoopback:
			return fmt.Sprintf("%q is a loopback address, this server's own: only the simulated machines of tests and demos listen there (allowed with --allow-loopback-metal)", v)
		}
		return ""
	}
}

func checkHostname(v any) string {
	if s := v.(string); len(s) > 253 || !hostnameRE.MatchString(s) {
		return fmt.Sprintf("%q is not a host name (lower-case DNS labels separated by dots)", s)
	}
	return ""
}

func checkDisk(v any) string {
	if s := v.(string); !diskRE.MatchString(s) || strings.Contains(s, "..") {
		return fmt.Sprintf("%q is not a device path such as /dev/sda", s)
	}
	return ""
}

func checkFingerprint(v any) string {
	if _, err := x509.ParseFingerprint(v.(string)); err != nil || v.(string) == "" {
		return fmt.Sprintf("%q is not a certificate fingerprint (the base64 SHA-256 of the public key, as talosctl prints it)", v)
	}
	return ""
}

// fields is the providerConfig schema.
func (m Module) fields() []module.Field {
	return []module.Field{
		{Name: "machines", Kind: module.ObjectList, Required: true, Fields: []module.Field{
			{Name: "address", Kind: module.String, Required: true, Check: checkAddress(m.AllowLoopback)},
			{Name: "hostname", Kind: module.String, Check: checkHostname},
			{Name: "installDisk", Kind: module.String, Check: checkDisk},
			{Name: "fingerprint", Kind: module.String, Check: checkFingerprint},
		}, Check: checkUnique},
		{Name: "installDisk", Kind: module.String, Check: checkDisk},
	}
}

// checkUnique refuses a machine listed twice, by address or host name.
func checkUnique(v any) string {
	seen := map[string]int{}
	for i, item := range v.([]any) {
		m := item.(map[string]any)
		for _, k := range []string{"address", "hostname"} {
			s := module.Str(m[k])
			if s == "" {
				continue
			}
			if a, err := netip.ParseAddr(s); err == nil && k == "address" {
				s = a.String()
			}
			if j, dup := seen[k+"="+s]; dup {
				return fmt.Sprintf("lists %s %s twice (machines %d and %d)", k, s, j, i)
			}
			seen[k+"="+s] = i
		}
	}
	return ""
}

// Validate implements module.Module. A node group uses the first count of
// its machines, so count may not exceed the list.
func (m Module) Validate(ng *schema.NodeGroup) []schema.Problem {
	c := module.Checker{Class: Class, NG: ng}
	c.Check(m.fields())
	if l, ok := ng.Spec.ProviderConfig["machines"].([]any); ok && ng.Spec.Count > len(l) {
		c.Add([]string{"machines"}, "lists %d machines for count %d: list a machine for every one counted", len(l), ng.Spec.Count)
	}
	return c.Problems
}

// Machine is one listed machine.
type Machine struct {
	Address, Hostname, InstallDisk, Fingerprint string
}

// Listed returns every machine a node group lists, spares included, with
// the group's install disk where a machine names none.
func Listed(ng *schema.NodeGroup) []Machine {
	l, _ := ng.Spec.ProviderConfig["machines"].([]any)
	var out []Machine
	for _, item := range l {
		m, _ := item.(map[string]any)
		mc := Machine{Address: module.Str(m["address"]), Hostname: module.Str(m["hostname"]),
			InstallDisk: module.Str(m["installDisk"]), Fingerprint: module.Str(m["fingerprint"])}
		if a, err := netip.ParseAddr(mc.Address); err == nil {
			mc.Address = a.String()
		}
		if mc.InstallDisk == "" {
			mc.InstallDisk = Module{}.InstallDisk(ng)
		}
		out = append(out, mc)
	}
	return out
}

// Machines returns the machines a node group uses: the first count it
// lists.
func Machines(ng *schema.NodeGroup) []Machine {
	l := Listed(ng)
	return l[:min(len(l), max(ng.Spec.Count, 0))]
}

// Resources implements module.Module: one terraform_data per machine,
// keyed by address, so that a machine taken out of the middle of the list
// removes that record and no other.
func (Module) Resources(in module.MachineInput) []module.Resource {
	each := map[string]any{}
	for i, m := range Machines(in.NodeGroup) {
		each[m.Address] = map[string]any{
			"address":      m.Address,
			"hostname":     module.Literal(m.Hostname),
			"install_disk": module.Literal(m.InstallDisk),
			"fingerprint":  module.Literal(m.Fingerprint),
			"index":        i,
			"tenant":       in.Tenant,
			"node_group":   in.NodeGroup.Metadata.Name,
			"role":         in.Role,
			"config_hash":  in.ConfigHash,
		}
	}
	body := map[string]any{"for_each": each, "input": "${each.value}"}
	return []module.Resource{{Type: TypeMachine, Name: in.ResourceName, Body: body}}
}

// Mappings implements module.Module. Only terraform_data records whose
// input is a machine's (an object with an address and a node group) are
// machines; the tenant's secrets are a terraform_data too.
func (Module) Mappings() []module.Mapping {
	return []module.Mapping{{
		TFType: TypeMachine,
		Kind:   schema.KindMachine,
		Extract: func(a map[string]any) module.MachineFacts {
			in, _ := a["input"].(map[string]any)
			if module.Str(in["address"]) == "" || module.Str(in["node_group"]) == "" {
				return module.MachineFacts{}
			}
			f := module.MachineFacts{
				ProviderID: module.Str(a["id"]),
				Address:    module.Str(in["address"]),
				Hostname:   module.Str(in["hostname"]),
				Tenant:     module.Str(in["tenant"]),
				NodeGroup:  module.Str(in["node_group"]),
				Role:       module.Str(in["role"]),
				ConfigHash: module.Str(in["config_hash"]),
			}
			switch n := in["index"].(type) {
			case float64:
				i := int(n)
				f.Index = &i
			case json.Number:
				if v, err := n.Int64(); err == nil {
					i := int(v)
					f.Index = &i
				}
			}
			return f
		},
	}}
}
