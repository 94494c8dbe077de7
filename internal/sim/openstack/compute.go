package openstack

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Nova's limits, as a real cloud enforces them.
const (
	maxUserData      = 65535 // bytes of base64
	maxMetadataItems = 128
	maxMetadataLen   = 255
)

// compute serves Nova under /compute/v2.1.
func (c *Cloud) compute(w http.ResponseWriter, r *http.Request, path string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case parts[0] == "flavors":
		c.flavors(w, r, parts[1:])
	case parts[0] == "os-server-groups":
		c.serverGroups(w, r, parts[1:])
	case parts[0] == "os-availability-zone":
		zones := []any{}
		for _, z := range c.catalog.Zones {
			zones = append(zones, map[string]any{"zoneName": z, "zoneState": map[string]any{"available": true}, "hosts": nil})
		}
		writeJSON(w, http.StatusOK, map[string]any{"availabilityZoneInfo": zones})
	case parts[0] == "servers" && len(parts) == 1 && r.Method == http.MethodPost:
		c.createServer(w, r)
	case parts[0] == "servers" && len(parts) == 1 || len(parts) == 2 && parts[1] == "detail":
		c.listServers(w, r)
	case parts[0] == "servers" && len(parts) >= 2:
		c.serverRoute(w, r, parts[1], parts[2:])
	default:
		notFound(w, "no such compute resource "+path)
	}
}

func (c *Cloud) flavors(w http.ResponseWriter, r *http.Request, rest []string) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{})
		return
	}
	view := func(f Flavor) map[string]any {
		return map[string]any{"id": f.ID, "name": f.Name, "vcpus": f.VCPUs, "ram": f.RAMMiB, "disk": f.DiskGiB,
			"OS-FLV-EXT-DATA:ephemeral": f.Ephemeral, "swap": 0, "rxtx_factor": 1.0,
			"os-flavor-access:is_public": true, "OS-FLV-DISABLED:disabled": false, "links": []any{}}
	}
	if len(rest) == 0 || rest[0] == "detail" {
		out := []any{}
		for _, f := range c.catalog.Flavors {
			out = append(out, view(f))
		}
		writeJSON(w, http.StatusOK, map[string]any{"flavors": out})
		return
	}
	f := c.catalog.flavor(rest[0])
	if f == nil {
		notFound(w, "Flavor "+rest[0]+" could not be found.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"flavor": view(*f)})
}

// createRequest is the body of POST /servers, as gophercloud sends it.
type createRequest struct {
	Server struct {
		Name             string            `json:"name"`
		ImageRef         string            `json:"imageRef"`
		FlavorRef        string            `json:"flavorRef"`
		UserData         string            `json:"user_data"`
		Metadata         map[string]string `json:"metadata"`
		AvailabilityZone string            `json:"availability_zone"`
		KeyName          string            `json:"key_name"`
		SecurityGroups   []struct {
			Name string `json:"name"`
		} `json:"security_groups"`
		Networks    json.RawMessage `json:"networks"`
		BlockDevice []struct {
			BootIndex       int    `json:"boot_index"`
			UUID            string `json:"uuid"`
			SourceType      string `json:"source_type"`
			DestinationType string `json:"destination_type"`
			VolumeSize      int    `json:"volume_size"`
			VolumeType      string `json:"volume_type"`
		} `json:"block_device_mapping_v2"`
	} `json:"server"`
	Hints struct {
		Group string `json:"group"`
	} `json:"os:scheduler_hints"`
}

type nicRequest struct {
	UUID    string `json:"uuid"`
	Port    string `json:"port"`
	FixedIP string `json:"fixed_ip"`
}

// checkCreate checks a create request against the catalog and Nova's
// limits, and returns the decoded user data and the requested NICs.
func (c *Cloud) checkCreate(req *createRequest) (userData []byte, nics []nicRequest, err error) {
	s := &req.Server
	if s.Name == "" {
		return nil, nil, fmt.Errorf("server name is required")
	}
	if c.catalog.flavor(s.FlavorRef) == nil {
		return nil, nil, fmt.Errorf("flavor %q could not be found", s.FlavorRef)
	}
	bootsFromVolume := false
	for _, bd := range s.BlockDevice {
		if bd.BootIndex == 0 && bd.DestinationType == "volume" {
			if bd.SourceType == "image" && c.catalog.imageByID(bd.UUID) == nil {
				return nil, nil, fmt.Errorf("image %q of the boot volume could not be found", bd.UUID)
			}
			if bd.VolumeSize <= 0 {
				return nil, nil, fmt.Errorf("boot volume needs a volume_size")
			}
			bootsFromVolume = true
		}
	}
	if !bootsFromVolume && c.catalog.imageByID(s.ImageRef) == nil {
		return nil, nil, fmt.Errorf("image %q could not be found", s.ImageRef)
	}
	if len(s.UserData) > maxUserData {
		return nil, nil, fmt.Errorf("user data is %d bytes of base64, over the limit of %d", len(s.UserData), maxUserData)
	}
	if userData, err = base64.StdEncoding.DecodeString(s.UserData); err != nil {
		return nil, nil, fmt.Errorf("user data is not valid base64")
	}
	if len(s.Metadata) > maxMetadataItems {
		return nil, nil, fmt.Errorf("%d metadata items, over the quota of %d", len(s.Metadata), maxMetadataItems)
	}
	for k, v := range s.Metadata {
		if k == "" || len(k) > maxMetadataLen || len(v) > maxMetadataLen {
			return nil, nil, fmt.Errorf("metadata item %q: keys and values are 1 to %d characters", k, maxMetadataLen)
		}
	}
	if s.AvailabilityZone != "" && !c.catalog.zone(strings.SplitN(s.AvailabilityZone, ":", 2)[0]) {
		return nil, nil, fmt.Errorf("availability zone %q is not available", s.AvailabilityZone)
	}
	for _, sg := range s.SecurityGroups {
		if c.catalog.secGroupByName(sg.Name) == nil {
			return nil, nil, fmt.Errorf("security group %s not found for project %s", sg.Name, projectID)
		}
	}
	if len(s.Networks) > 0 && s.Networks[0] == '[' {
		if err := json.Unmarshal(s.Networks, &nics); err != nil {
			return nil, nil, fmt.Errorf("networks: %v", err)
		}
	}
	if len(nics) == 0 && len(c.catalog.Networks) > 0 {
		nics = []nicRequest{{UUID: c.catalog.Networks[0].ID}}
	}
	return userData, nics, nil
}

func (c *Cloud) createServer(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decode(r, &req); err != nil {
		badRequest(w, err.Error())
		return
	}
	userData, nics, err := c.checkCreate(&req)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	s, err := c.addServer(&req, userData, nics)
	if err != nil {
		status := http.StatusBadRequest
		if strings.Contains(err.Error(), "save") {
			status = http.StatusInternalServerError
		}
		writeJSON(w, status, map[string]any{"badRequest": map[string]any{"code": status, "message": err.Error()}})
		return
	}
	if s.Booted {
		c.tell(ServerCreated, s.ID, s.addr, userData, s.FlavorID)
	}
	groups := []any{}
	for _, g := range s.SecurityGroups {
		groups = append(groups, map[string]any{"name": g})
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"server": map[string]any{
		"id": s.ID, "links": []any{}, "OS-DCF:diskConfig": "MANUAL", "security_groups": groups,
	}})
}

// addServer records a new server, its ports and its group membership.
func (c *Cloud) addServer(req *createRequest, userData []byte, nics []nicRequest) (*server, error) {
	in := &req.Server
	now := c.opts.Now().UTC().Truncate(time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	var g *group
	if req.Hints.Group != "" {
		if g = c.st.Groups[req.Hints.Group]; g == nil {
			return nil, fmt.Errorf("server group %s not found", req.Hints.Group)
		}
	}
	s := &server{
		ID: newUUID(), Name: in.Name, Status: c.takeBuild(), FlavorID: in.FlavorRef, ImageID: in.ImageRef,
		Zone: strings.SplitN(in.AvailabilityZone, ":", 2)[0], KeyName: in.KeyName, Metadata: map[string]string{},
		UserDataBytes: len(userData), Created: now, Updated: now,
	}
	if s.Zone == "" {
		s.Zone = c.catalog.Zones[0]
	}
	for k, v := range in.Metadata {
		s.Metadata[k] = v
	}
	if len(in.UserData) > 0 {
		sum := sha256.Sum256(userData)
		s.UserDataSHA256 = hex.EncodeToString(sum[:])
	}
	for _, sg := range in.SecurityGroups {
		s.SecurityGroups = append(s.SecurityGroups, c.catalog.secGroupByName(sg.Name).Name)
	}
	if len(s.SecurityGroups) == 0 {
		s.SecurityGroups = []string{"default"}
	}
	for _, bd := range in.BlockDevice {
		if bd.BootIndex == 0 && bd.DestinationType == "volume" {
			s.BootVolume = &bootVolume{ID: newUUID(), SizeGiB: bd.VolumeSize, Type: bd.VolumeType}
			s.ImageID = ""
		}
	}
	if err := c.attach(s, nics, now); err != nil {
		return nil, err
	}
	if g != nil {
		s.Group = g.ID
		g.Members = append(g.Members, s.ID)
	}
	s.Booted = s.Status == "ACTIVE"
	c.st.Servers[s.ID] = s
	c.st.index()
	if err := c.st.save(c.opts.Dir); err != nil {
		return nil, err
	}
	return s, nil
}

// attach gives s a port on every network asked for: an existing port, or
// one made for the server. It must hold c.mu.
func (c *Cloud) attach(s *server, nics []nicRequest, now time.Time) error {
	for _, n := range nics {
		if n.Port != "" {
			p := c.st.Ports[n.Port]
			if p == nil {
				return fmt.Errorf("port %s could not be found", n.Port)
			}
			if p.DeviceID != "" {
				return fmt.Errorf("port %s is still in use", n.Port)
			}
			p.DeviceID, p.DeviceOwner = s.ID, "compute:"+s.Zone
			s.PortIDs = append(s.PortIDs, p.ID)
			continue
		}
		if c.catalog.network(n.UUID) == nil {
			return fmt.Errorf("network %s could not be found", n.UUID)
		}
		addr, err := c.st.allocate(c.opts.Addresses)
		if err != nil {
			return err
		}
		p := &port{ID: newUUID(), NetworkID: n.UUID, Address: addr.String(), MAC: mac(addr), DeviceID: s.ID,
			DeviceOwner: "compute:" + s.Zone, SecurityGroups: c.groupIDs(s.SecurityGroups), AdminStateUp: true,
			OwnedByServer: true, Created: now}
		c.st.Ports[p.ID] = p
		s.PortIDs = append(s.PortIDs, p.ID)
	}
	return nil
}

func (c *Cloud) groupIDs(names []string) []string {
	out := []string{}
	for _, n := range names {
		if sg := c.catalog.secGroupByName(n); sg != nil {
			out = append(out, sg.ID)
		}
	}
	return out
}

func (c *Cloud) listServers(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []any{}
	for _, s := range c.st.sortedServers() {
		out = append(out, c.serverView(s))
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}

// serverRoute serves /servers/{id}[/...].
func (c *Cloud) serverRoute(w http.ResponseWriter, r *http.Request, id string, rest []string) {
	c.mu.Lock()
	s := c.st.Servers[id]
	c.mu.Unlock()
	if s == nil {
		notFound(w, "Instance "+id+" could not be found.")
		return
	}
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		c.mu.Lock()
		v := c.serverView(s)
		c.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"server": v})
	case len(rest) == 0 && r.Method == http.MethodPut:
		c.renameServer(w, r, s)
	case len(rest) == 0 && r.Method == http.MethodDelete:
		c.deleteServer(w, id)
	case rest[0] == "tags":
		writeJSON(w, http.StatusOK, map[string]any{"tags": []string{}})
	case rest[0] == "metadata":
		c.serverMetadata(w, r, s, rest[1:])
	case rest[0] == "action":
		c.serverAction(w, r, s)
	default:
		notFound(w, "no such server resource "+strings.Join(rest, "/"))
	}
}

func (c *Cloud) renameServer(w http.ResponseWriter, r *http.Request, s *server) {
	var body struct {
		Server struct {
			Name string `json:"name"`
		} `json:"server"`
	}
	if err := decode(r, &body); err != nil {
		badRequest(w, err.Error())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if body.Server.Name != "" {
		s.Name = body.Server.Name
	}
	s.Updated = c.opts.Now().UTC().Truncate(time.Second)
	if err := c.st.save(c.opts.Dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": c.serverView(s)})
}

// deleteServer removes a server: the ports Nova made for it go with it,
// the others are detached.
func (c *Cloud) deleteServer(w http.ResponseWriter, id string) {
	c.mu.Lock()
	s := c.st.Servers[id]
	if s == nil {
		c.mu.Unlock()
		notFound(w, "Instance "+id+" could not be found.")
		return
	}
	addr := s.addr
	for _, pid := range s.PortIDs {
		p := c.st.Ports[pid]
		switch {
		case p == nil:
		case p.OwnedByServer:
			delete(c.st.Ports, pid)
		default:
			p.DeviceID, p.DeviceOwner = "", ""
		}
	}
	if g := c.st.Groups[s.Group]; g != nil {
		g.Members = remove(g.Members, id)
	}
	delete(c.st.Servers, id)
	err := c.st.save(c.opts.Dir)
	c.mu.Unlock()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{})
		return
	}
	if s.Booted {
		c.tell(ServerDeleted, id, addr, nil, "")
	}
	w.WriteHeader(http.StatusNoContent)
}

func (c *Cloud) serverMetadata(w http.ResponseWriter, r *http.Request, s *server, rest []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
	case len(rest) == 0 && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		var body struct {
			Metadata map[string]string `json:"metadata"`
		}
		if err := decode(r, &body); err != nil {
			badRequest(w, err.Error())
			return
		}
		if r.Method == http.MethodPut {
			s.Metadata = map[string]string{}
		}
		for k, v := range body.Metadata {
			if k == "" || len(k) > maxMetadataLen || len(v) > maxMetadataLen {
				badRequest(w, fmt.Sprintf("metadata item %q: keys and values are 1 to %d characters", k, maxMetadataLen))
				return
			}
			s.Metadata[k] = v
		}
		if len(s.Metadata) > maxMetadataItems {
			badRequest(w, "metadata quota exceeded")
			return
		}
	case len(rest) == 1 && r.Method == http.MethodDelete:
		if _, ok := s.Metadata[rest[0]]; !ok {
			notFound(w, "Metadata item was not found")
			return
		}
		delete(s.Metadata, rest[0])
		if err := c.st.save(c.opts.Dir); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{})
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		notFound(w, "no such metadata resource")
		return
	}
	if r.Method != http.MethodGet {
		s.Updated = c.opts.Now().UTC().Truncate(time.Second)
		if err := c.st.save(c.opts.Dir); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"metadata": s.Metadata})
}

// serverAction serves os-stop and os-start; other actions are not
// simulated.
func (c *Cloud) serverAction(w http.ResponseWriter, r *http.Request, s *server) {
	var body map[string]json.RawMessage
	if err := decode(r, &body); err != nil {
		badRequest(w, err.Error())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case body["os-stop"] != nil && s.Status == "ACTIVE":
		s.Status = "SHUTOFF"
	case body["os-start"] != nil && s.Status == "SHUTOFF":
		s.Status = "ACTIVE"
	case body["os-stop"] != nil || body["os-start"] != nil:
		conflict(w, "Cannot change the power state of an instance in "+s.Status)
		return
	default:
		badRequest(w, "server action not simulated")
		return
	}
	if err := c.st.save(c.opts.Dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{})
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// serverView is the server as GET /servers/{id} shows it. It must hold
// c.mu.
func (c *Cloud) serverView(s *server) map[string]any {
	addresses := map[string][]any{}
	for _, pid := range s.PortIDs {
		p := c.st.Ports[pid]
		if p == nil {
			continue
		}
		name := p.NetworkID
		if n := c.catalog.network(p.NetworkID); n != nil {
			name = n.Name
		}
		addresses[name] = append(addresses[name], map[string]any{
			"addr": p.Address, "version": 4, "OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": p.MAC,
		})
	}
	groups := []any{}
	for _, g := range s.SecurityGroups {
		groups = append(groups, map[string]any{"name": g})
	}
	var image any = ""
	if s.ImageID != "" {
		image = map[string]any{"id": s.ImageID, "links": []any{}}
	}
	volumes := []any{}
	if s.BootVolume != nil {
		volumes = append(volumes, map[string]any{"id": s.BootVolume.ID, "delete_on_termination": true})
	}
	power := 1
	vm := strings.ToLower(s.Status)
	switch s.Status {
	case "BUILD":
		power, vm = 0, "building"
	case "SHUTOFF":
		power, vm = 4, "stopped"
	case "ERROR":
		power = 0
	}
	v := map[string]any{
		"id": s.ID, "name": s.Name, "status": s.Status, "tenant_id": projectID, "user_id": nameID("user"),
		"created": s.Created.Format(time.RFC3339), "updated": s.Updated.Format(time.RFC3339),
		"hostId": nameID("host:" + s.Zone), "accessIPv4": "", "accessIPv6": "", "progress": 0,
		"addresses": addresses, "flavor": map[string]any{"id": s.FlavorID, "links": []any{}}, "image": image,
		"metadata": s.Metadata, "key_name": s.KeyName, "security_groups": groups, "links": []any{},
		"OS-EXT-AZ:availability_zone": s.Zone, "OS-EXT-STS:power_state": power, "OS-EXT-STS:vm_state": vm,
		"OS-EXT-STS:task_state": nil, "OS-DCF:diskConfig": "MANUAL", "os-extended-volumes:volumes_attached": volumes,
	}
	if s.Status == "ERROR" {
		v["fault"] = map[string]any{"code": 500, "message": "No valid host was found. (simulated)", "created": s.Created.Format(time.RFC3339)}
	}
	return v
}

func (c *Cloud) serverGroups(w http.ResponseWriter, r *http.Request, rest []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	view := func(g *group) map[string]any {
		return map[string]any{"id": g.ID, "name": g.Name, "policy": g.Policy, "policies": []string{g.Policy},
			"members": append([]string{}, g.Members...), "metadata": map[string]any{}, "project_id": projectID, "user_id": nameID("user")}
	}
	switch {
	case len(rest) == 0 && r.Method == http.MethodPost:
		var body struct {
			Group struct {
				Name     string   `json:"name"`
				Policy   string   `json:"policy"`
				Policies []string `json:"policies"`
			} `json:"server_group"`
		}
		if err := decode(r, &body); err != nil {
			badRequest(w, err.Error())
			return
		}
		policy := body.Group.Policy
		if policy == "" && len(body.Group.Policies) == 1 {
			policy = body.Group.Policies[0]
		}
		switch policy {
		case "affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity":
		default:
			badRequest(w, fmt.Sprintf("server group policy %q is not one of affinity, anti-affinity, soft-affinity, soft-anti-affinity", policy))
			return
		}
		g := &group{ID: newUUID(), Name: body.Group.Name, Policy: policy, Members: []string{}}
		c.st.Groups[g.ID] = g
		if err := c.st.save(c.opts.Dir); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"server_group": view(g)})
	case len(rest) == 0 && r.Method == http.MethodGet:
		out := []any{}
		ids := make([]string, 0, len(c.st.Groups))
		for id := range c.st.Groups {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			out = append(out, view(c.st.Groups[id]))
		}
		writeJSON(w, http.StatusOK, map[string]any{"server_groups": out})
	case len(rest) == 1:
		g := c.st.Groups[rest[0]]
		if g == nil {
			notFound(w, "Instance group "+rest[0]+" could not be found.")
			return
		}
		if r.Method == http.MethodDelete {
			delete(c.st.Groups, g.ID)
			if err := c.st.save(c.opts.Dir); err != nil {
				writeJSON(w, http.StatusInternalServerError, map[string]any{})
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"server_group": view(g)})
	default:
		notFound(w, "no such server group resource")
	}
}

func remove(list []string, v string) []string {
	out := list[:0]
	for _, x := range list {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}
