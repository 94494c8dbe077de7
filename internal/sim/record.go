package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"time"
)

// ProviderSource is the provider's source address in tofu configurations.
const ProviderSource = "rezuscloud.io/rezuscloud/rezussim"

// Record is one simulated machine as it is kept on disk.
type Record struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Tenant    string `json:"tenant"`
	NodeGroup string `json:"nodeGroup"`
	Role      string `json:"role"`
	Shape     string `json:"shape"`
	Image     string `json:"image"`
	Address   string `json:"address"`
	Hostname  string `json:"hostname"`
	// UserDataSHA256 is the hex SHA-256 of the user data the machine booted
	// with; empty user data hashes like any other.
	UserDataSHA256 string `json:"userDataSHA256"`
	// CreatedAt is when the machine was created; a status plane derives
	// simulated boot stages from it.
	CreatedAt time.Time `json:"createdAt"`
	// UpdatedAt is when the record last changed (creation or in-place update).
	UpdatedAt time.Time `json:"updatedAt"`
	// KubernetesAPI asks the node host to run a real Kubernetes control
	// plane for the machine's cluster once a control plane of it is
	// bootstrapped (see talosnode and kubeapi).
	KubernetesAPI bool `json:"kubernetesAPI,omitempty"`
}

// Spec is what a caller asks for when it creates a machine.
type Spec struct {
	Name, Tenant, NodeGroup, Role, Shape, Image string
	UserData                                    []byte
	KubernetesAPI                               bool
}

// Roles a machine can have.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

var (
	idPattern    = regexp.MustCompile(`^sim-[0-9a-f]{16}$`)
	labelPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	namePattern  = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
)

// ValidID reports whether id has the form the store gives out: "sim-" and 16
// lower-case hex digits. Anything else can never name a file in the store.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// CheckLabel returns an error unless s is a DNS label (RFC 1123): 1–63
// lower-case letters, digits and '-', starting and ending with a letter or digit.
func CheckLabel(what, s string) error {
	if len(s) == 0 || len(s) > 63 || !labelPattern.MatchString(s) {
		return fmt.Errorf("%s %q is not a DNS label (1-63 of a-z, 0-9, '-'; starting and ending with a letter or digit)", what, s)
	}
	return nil
}

// CheckName returns an error unless s is a DNS subdomain (RFC 1123): 1–253
// lower-case letters, digits, '-' and '.', starting and ending with a letter
// or digit. Machine names are checked this way; tenants and node groups,
// which go into host names, must be labels.
func CheckName(what, s string) error {
	if len(s) == 0 || len(s) > 253 || !namePattern.MatchString(s) {
		return fmt.Errorf("%s %q is not a DNS subdomain (1-253 of a-z, 0-9, '-', '.'; starting and ending with a letter or digit)", what, s)
	}
	return nil
}

// CheckRole returns an error unless role is controlplane or worker.
func CheckRole(role string) error {
	if role != RoleControlPlane && role != RoleWorker {
		return fmt.Errorf("role %q is neither %q nor %q", role, RoleControlPlane, RoleWorker)
	}
	return nil
}

// Check validates a spec before anything is allocated for it.
func (s Spec) Check() error {
	if err := CheckName("name", s.Name); err != nil {
		return err
	}
	for _, f := range []struct{ what, v string }{
		{"tenant", s.Tenant}, {"node_group", s.NodeGroup},
	} {
		if err := CheckLabel(f.what, f.v); err != nil {
			return err
		}
	}
	if err := CheckRole(s.Role); err != nil {
		return err
	}
	if s.Shape == "" {
		return fmt.Errorf("shape is empty")
	}
	if s.Image == "" {
		return fmt.Errorf("image is empty")
	}
	return nil
}

// HashUserData returns the hex SHA-256 that a record keeps instead of the
// user data itself.
func HashUserData(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Hostname derives a machine's host name from its tenant, node group and id:
// "<tenant>-<node_group>-<last 6 hex digits of id>". When that would exceed a
// DNS label's 63 bytes, the tenant and node group parts are shortened; the id
// part always stays, so two machines never share a host name by truncation
// alone.
func Hostname(tenant, nodeGroup, id string) string {
	suffix := id[len(id)-6:]
	prefix := tenant + "-" + nodeGroup
	if max := 63 - 1 - len(suffix); len(prefix) > max {
		prefix = prefix[:max]
		for len(prefix) > 0 && prefix[len(prefix)-1] == '-' {
			prefix = prefix[:len(prefix)-1]
		}
	}
	return prefix + "-" + suffix
}

// Check reports the first thing wrong with a record read from disk.
func (r *Record) Check() error {
	if !ValidID(r.ID) {
		return fmt.Errorf("id %q is not of the form sim-<16 hex digits>", r.ID)
	}
	if err := (Spec{Name: r.Name, Tenant: r.Tenant, NodeGroup: r.NodeGroup, Role: r.Role, Shape: r.Shape, Image: r.Image}).Check(); err != nil {
		return err
	}
	a, err := netip.ParseAddr(r.Address)
	if err != nil {
		return fmt.Errorf("address: %w", err)
	}
	if !Loopback(a) {
		return fmt.Errorf("address %s is not a simulated machine's address (127.B.x.y, B not 0)", a)
	}
	if r.Hostname == "" {
		return fmt.Errorf("hostname is empty")
	}
	if b, err := hex.DecodeString(r.UserDataSHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("userDataSHA256 %q is not a hex SHA-256", r.UserDataSHA256)
	}
	if r.CreatedAt.IsZero() {
		return fmt.Errorf("createdAt is missing")
	}
	return nil
}

// Marshal encodes a record as the indented JSON kept on disk.
func (r *Record) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Unmarshal decodes and checks a record.
func Unmarshal(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, err
	}
	if err := r.Check(); err != nil {
		return Record{}, err
	}
	return r, nil
}
