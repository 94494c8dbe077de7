package openstack

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// network serves Neutron under /network/v2.0.
func (c *Cloud) network(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	kind := strings.TrimSuffix(parts[0], ".json")
	switch kind {
	case "networks", "subnets", "security-groups":
		if r.Method != http.MethodGet {
			writeJSON(w, http.StatusMethodNotAllowed, map[string]any{})
			return
		}
		c.catalogList(w, r, kind, parts[1:])
	case "ports":
		c.ports(w, r, parts[1:])
	default:
		notFound(w, "no such network resource "+path)
	}
}

// catalogList lists or gets networks, subnets or security groups.
func (c *Cloud) catalogList(w http.ResponseWriter, r *http.Request, kind string, rest []string) {
	var items []map[string]any
	for _, n := range c.catalog.Networks {
		switch kind {
		case "networks":
			items = append(items, map[string]any{
				"id": n.ID, "name": n.Name, "status": "ACTIVE", "admin_state_up": true, "shared": false,
				"subnets": []string{n.SubnetID}, "tenant_id": projectID, "project_id": projectID, "mtu": 1500,
				"router:external": false, "port_security_enabled": true, "availability_zones": c.catalog.Zones, "tags": []string{},
			})
		case "subnets":
			items = append(items, map[string]any{
				"id": n.SubnetID, "name": n.Name + "-subnet", "network_id": n.ID, "cidr": c.opts.Addresses.String(),
				"ip_version": 4, "enable_dhcp": true, "gateway_ip": c.opts.Addresses.Addr().Next().String(),
				"tenant_id": projectID, "project_id": projectID, "tags": []string{},
			})
		}
	}
	if kind == "security-groups" {
		for _, g := range c.catalog.SecurityGroups {
			items = append(items, map[string]any{"id": g.ID, "name": g.Name, "description": "", "tenant_id": projectID,
				"project_id": projectID, "security_group_rules": []any{}, "stateful": true, "tags": []string{}})
		}
	}
	singular := map[string]string{"networks": "network", "subnets": "subnet", "security-groups": "security_group"}[kind]
	plural := strings.ReplaceAll(kind, "-", "_")
	if len(rest) > 0 {
		for _, it := range items {
			if it["id"] == rest[0] {
				writeJSON(w, http.StatusOK, map[string]any{singular: it})
				return
			}
		}
		notFound(w, fmt.Sprintf("%s %s could not be found.", singular, rest[0]))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{plural: filter(items, r.URL.Query())})
}

// filter keeps the items whose fields equal every query parameter that
// names a field; other parameters (fields, sort_key, limit, ...) are
// ignored.
func filter(items []map[string]any, q url.Values) []map[string]any {
	out := []map[string]any{}
next:
	for _, it := range items {
		for k, vals := range q {
			v, ok := it[k]
			if !ok {
				continue
			}
			switch v.(type) {
			case string, bool, int:
			default:
				continue
			}
			if !strings.EqualFold(fmt.Sprint(v), vals[0]) {
				continue next
			}
		}
		out = append(out, it)
	}
	return out
}

func (c *Cloud) ports(w http.ResponseWriter, r *http.Request, rest []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(rest) == 0 && r.Method == http.MethodPost:
		c.createPort(w, r)
	case len(rest) == 0 && r.Method == http.MethodGet:
		var items []map[string]any
		for _, id := range sortedKeys(c.st.Ports) {
			items = append(items, c.portView(c.st.Ports[id]))
		}
		writeJSON(w, http.StatusOK, map[string]any{"ports": filter(items, r.URL.Query())})
	case len(rest) == 1:
		p := c.st.Ports[rest[0]]
		if p == nil {
			notFound(w, "Port "+rest[0]+" could not be found.")
			return
		}
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, map[string]any{"port": c.portView(p)})
		case http.MethodPut:
			c.updatePort(w, r, p)
		case http.MethodDelete:
			if p.DeviceID != "" && c.st.Servers[p.DeviceID] != nil {
				conflict(w, "Port "+p.ID+" is still in use by server "+p.DeviceID)
				return
			}
			delete(c.st.Ports, p.ID)
			if err := c.st.save(c.opts.Dir); err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]any{})
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, http.StatusMethodNotAllowed, map[string]any{})
		}
	default:
		notFound(w, "no such port resource")
	}
}

type portRequest struct {
	Port struct {
		Name           *string   `json:"name"`
		Description    *string   `json:"description"`
		NetworkID      string    `json:"network_id"`
		AdminStateUp   *bool     `json:"admin_state_up"`
		SecurityGroups *[]string `json:"security_groups"`
		FixedIPs       []struct {
			SubnetID  string `json:"subnet_id"`
			IPAddress string `json:"ip_address"`
		} `json:"fixed_ips"`
	} `json:"port"`
}

// createPort must hold c.mu.
func (c *Cloud) createPort(w http.ResponseWriter, r *http.Request) {
	var req portRequest
	if err := decode(r, &req); err != nil {
		badRequest(w, err.Error())
		return
	}
	in := req.Port
	if c.catalog.network(in.NetworkID) == nil {
		notFound(w, "Network "+in.NetworkID+" could not be found.")
		return
	}
	if len(in.FixedIPs) > 0 && in.FixedIPs[0].IPAddress != "" {
		badRequest(w, "the simulated cloud hands out fixed IPs itself")
		return
	}
	addr, err := c.st.allocate(c.opts.Addresses)
	if err != nil {
		conflict(w, err.Error())
		return
	}
	p := &port{ID: newUUID(), NetworkID: in.NetworkID, Address: addr.String(), MAC: mac(addr), AdminStateUp: true,
		SecurityGroups: c.groupIDs([]string{"default"}), Created: c.opts.Now().UTC().Truncate(time.Second)}
	if msg := c.applyPort(p, &req); msg != "" {
		badRequest(w, msg)
		return
	}
	c.st.Ports[p.ID] = p
	if err := c.st.save(c.opts.Dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"port": c.portView(p)})
}

// applyPort sets the fields a create or update gives; it returns a
// message for a bad request.
func (c *Cloud) applyPort(p *port, req *portRequest) string {
	in := req.Port
	if in.Name != nil {
		p.Name = *in.Name
	}
	if in.Description != nil {
		p.Description = *in.Description
	}
	if in.AdminStateUp != nil {
		p.AdminStateUp = *in.AdminStateUp
	}
	if in.SecurityGroups != nil {
		p.SecurityGroups = []string{}
		for _, id := range *in.SecurityGroups {
			if c.catalog.secGroupByName(id) == nil {
				return "Security group " + id + " does not exist"
			}
			p.SecurityGroups = append(p.SecurityGroups, c.catalog.secGroupByName(id).ID)
		}
	}
	return ""
}

// updatePort must hold c.mu.
func (c *Cloud) updatePort(w http.ResponseWriter, r *http.Request, p *port) {
	var req portRequest
	if err := decode(r, &req); err != nil {
		badRequest(w, err.Error())
		return
	}
	if msg := c.applyPort(p, &req); msg != "" {
		badRequest(w, msg)
		return
	}
	if err := c.st.save(c.opts.Dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"port": c.portView(p)})
}

// portView must hold c.mu.
func (c *Cloud) portView(p *port) map[string]any {
	status := "DOWN"
	if p.DeviceID != "" {
		status = "ACTIVE"
	}
	subnet := ""
	if n := c.catalog.network(p.NetworkID); n != nil {
		subnet = n.SubnetID
	}
	return map[string]any{
		"id": p.ID, "name": p.Name, "description": p.Description, "network_id": p.NetworkID, "status": status,
		"admin_state_up": p.AdminStateUp, "mac_address": p.MAC, "device_id": p.DeviceID, "device_owner": p.DeviceOwner,
		"fixed_ips":       []any{map[string]any{"subnet_id": subnet, "ip_address": p.Address}},
		"security_groups": p.SecurityGroups, "tenant_id": projectID, "project_id": projectID,
		"allowed_address_pairs": []any{}, "extra_dhcp_opts": []any{}, "port_security_enabled": true,
		"binding:vnic_type": "normal", "binding:host_id": "", "binding:vif_type": "unbound", "binding:profile": map[string]any{},
		"binding:vif_details": map[string]any{}, "dns_name": "", "dns_assignment": []any{}, "tags": []string{},
		"created_at": p.Created.Format(time.RFC3339), "updated_at": p.Created.Format(time.RFC3339),
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
