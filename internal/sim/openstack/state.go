package openstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Files of the cloud's directory.
const (
	stateFile   = "state.json"
	journalFile = "journal.log"
	// FaultFile is where another process drops faults for the cloud to
	// pick up (see Faults).
	FaultFile = "faults.json"
)

// state is everything the cloud has created. It is written whole, through
// a temporary file and a rename, after every change.
type state struct {
	Servers map[string]*server `json:"servers"`
	Ports   map[string]*port   `json:"ports"`
	Groups  map[string]*group  `json:"serverGroups"`
}

// server is a Nova server. Its user data is not kept: UserDataSHA256 is the
// hash of the decoded bytes.
type server struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Status         string            `json:"status"`
	FlavorID       string            `json:"flavorId"`
	ImageID        string            `json:"imageId,omitempty"`
	Zone           string            `json:"availabilityZone"`
	KeyName        string            `json:"keyName,omitempty"`
	Metadata       map[string]string `json:"metadata"`
	SecurityGroups []string          `json:"securityGroups"`
	PortIDs        []string          `json:"portIds"`
	Group          string            `json:"serverGroup,omitempty"`
	BootVolume     *bootVolume       `json:"bootVolume,omitempty"`
	UserDataSHA256 string            `json:"userDataSha256,omitempty"`
	UserDataBytes  int               `json:"userDataBytes"`
	// Booted is set once the server went ACTIVE and the hook was told.
	Booted  bool      `json:"booted"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// addr caches the first port's address for hooks; not stored.
	addr netip.Addr
}

func (s *server) address() netip.Addr { return s.addr }

// bootVolume is the volume Nova made from an image for a server that boots
// from a volume.
type bootVolume struct {
	ID      string `json:"id"`
	SizeGiB int    `json:"sizeGiB"`
	Type    string `json:"type,omitempty"`
}

// port is a Neutron port. OwnedByServer marks one Nova made for a server
// attached to a network, which goes away with the server.
type port struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	NetworkID      string   `json:"networkId"`
	Address        string   `json:"address"`
	MAC            string   `json:"mac"`
	DeviceID       string   `json:"deviceId"`
	DeviceOwner    string   `json:"deviceOwner"`
	SecurityGroups []string `json:"securityGroups"`
	AdminStateUp   bool     `json:"adminStateUp"`
	OwnedByServer  bool     `json:"ownedByServer,omitempty"`
	Description    string   `json:"description,omitempty"`
	Created        time.Time
}

// group is a Nova server group.
type group struct {
	ID      string   `json:"id"`
	Name    string   `json:"name"`
	Policy  string   `json:"policy"`
	Members []string `json:"members"`
}

func loadState(path string) (*state, error) {
	st := &state{Servers: map[string]*server{}, Ports: map[string]*port{}, Groups: map[string]*group{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("simulated OpenStack: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("simulated OpenStack: state %s: %w", path, err)
	}
	for _, s := range st.Servers {
		if s.Metadata == nil {
			s.Metadata = map[string]string{}
		}
	}
	st.index()
	return st, nil
}

// index refreshes the cached addresses of servers.
func (st *state) index() {
	for _, s := range st.Servers {
		s.addr = netip.Addr{}
		if len(s.PortIDs) > 0 {
			if p := st.Ports[s.PortIDs[0]]; p != nil {
				s.addr, _ = netip.ParseAddr(p.Address)
			}
		}
	}
}

// save writes the state to dir.
func (st *state) save(dir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("save simulated OpenStack state: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, stateFile))
	}
	if err != nil {
		return fmt.Errorf("save simulated OpenStack state: %w", err)
	}
	return nil
}

func (st *state) sortedServers() []*server {
	out := make([]*server, 0, len(st.Servers))
	for _, s := range st.Servers {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// allocate returns the lowest free host address of block, skipping
// addresses that end in .0 or .255.
func (st *state) allocate(block netip.Prefix) (netip.Addr, error) {
	taken := map[netip.Addr]bool{}
	for _, p := range st.Ports {
		if a, err := netip.ParseAddr(p.Address); err == nil {
			taken[a] = true
		}
	}
	for a := block.Addr().Next(); block.Contains(a); a = a.Next() {
		last := a.As4()[3]
		if last == 0 || last == 255 || taken[a] {
			continue
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("no free address in %s", block)
}

// mac returns a MAC address derived from a port's address, in the range
// OpenStack uses (fa:16:3e).
func mac(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", b[1], b[2], b[3])
}
