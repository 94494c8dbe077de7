package client

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Paths of the read API. Names are escaped; node groups and config
// patches are addressed inside their tenant.
const (
	TenantsPath   = "/api/v1/tenants"
	MachinesPath  = "/api/v1/machines"
	ProvidersPath = "/api/v1/providers"
	CommitsPath   = "/api/v1/commits"
	StatusPath    = "/api/v1/status"
	VersionPath   = "/version"
	// MachineEventsPath and CommitEventsPath are the watches of every
	// machine and every commit.
	MachineEventsPath = "/api/v1/machines/events"
	CommitEventsPath  = "/api/v1/commits/events"
)

func esc(s string) string { return url.PathEscape(s) }

// TenantPath is the tenant named name.
func TenantPath(name string) string { return TenantsPath + "/" + esc(name) }

// TenantEventsPath is the watch of a tenant, its node groups, patches and
// machines.
func TenantEventsPath(tenant string) string { return TenantPath(tenant) + "/events" }

// NodeGroupsPath lists the node groups of a tenant.
func NodeGroupsPath(tenant string) string { return TenantPath(tenant) + "/node-groups" }

// NodeGroupPath is one node group of a tenant.
func NodeGroupPath(tenant, name string) string { return NodeGroupsPath(tenant) + "/" + esc(name) }

// PatchesPath lists the config patches of a tenant.
func PatchesPath(tenant string) string { return TenantPath(tenant) + "/patches" }

// PatchPath is one config patch of a tenant.
func PatchPath(tenant, name string) string { return PatchesPath(tenant) + "/" + esc(name) }

// TenantMachinesPath lists the machines of a tenant.
func TenantMachinesPath(tenant string) string { return TenantPath(tenant) + "/machines" }

// MachinePath is one machine; with a tenant, only a machine of that
// tenant.
func MachinePath(tenant, id string) string {
	if tenant != "" {
		return TenantMachinesPath(tenant) + "/" + esc(id)
	}
	return MachinesPath + "/" + esc(id)
}

// ProviderPath is one provider module, by its class.
func ProviderPath(name string) string { return ProvidersPath + "/" + esc(name) }

// CommitPath is one commit: its full revision or a unique prefix of at
// least 7 characters.
func CommitPath(rev string) string { return CommitsPath + "/" + esc(rev) }

// KubeconfigPath and TalosconfigPath are a tenant's admin-only downloads.
func KubeconfigPath(tenant string) string  { return TenantPath(tenant) + "/kubeconfig" }
func TalosconfigPath(tenant string) string { return TenantPath(tenant) + "/talosconfig" }

// Tenants lists the tenants.
func (c *Client) Tenants(ctx context.Context, opts ListOptions) ([]schema.Tenant, error) {
	return listOf[schema.Tenant](ctx, c, TenantsPath, opts)
}

// Tenant gets one tenant.
func (c *Client) Tenant(ctx context.Context, name string) (*schema.Tenant, error) {
	return getOf[schema.Tenant](ctx, c, TenantPath(name))
}

// NodeGroups lists the node groups of a tenant.
func (c *Client) NodeGroups(ctx context.Context, tenant string, opts ListOptions) ([]schema.NodeGroup, error) {
	return listOf[schema.NodeGroup](ctx, c, NodeGroupsPath(tenant), opts)
}

// NodeGroup gets one node group of a tenant.
func (c *Client) NodeGroup(ctx context.Context, tenant, name string) (*schema.NodeGroup, error) {
	return getOf[schema.NodeGroup](ctx, c, NodeGroupPath(tenant, name))
}

// ConfigPatches lists the config patches of a tenant.
func (c *Client) ConfigPatches(ctx context.Context, tenant string, opts ListOptions) ([]schema.ConfigPatch, error) {
	return listOf[schema.ConfigPatch](ctx, c, PatchesPath(tenant), opts)
}

// ConfigPatch gets one config patch of a tenant.
func (c *Client) ConfigPatch(ctx context.Context, tenant, name string) (*schema.ConfigPatch, error) {
	return getOf[schema.ConfigPatch](ctx, c, PatchPath(tenant, name))
}

// Machines lists the machines of a tenant, or of every tenant when tenant
// is "".
func (c *Client) Machines(ctx context.Context, tenant string, opts ListOptions) ([]schema.Machine, error) {
	path := MachinesPath
	if tenant != "" {
		path = TenantMachinesPath(tenant)
	}
	return listOf[schema.Machine](ctx, c, path, opts)
}

// Machine gets one machine by its ID; with a tenant, only a machine of
// that tenant.
func (c *Client) Machine(ctx context.Context, tenant, id string) (*schema.Machine, error) {
	return getOf[schema.Machine](ctx, c, MachinePath(tenant, id))
}

// Providers lists the provider modules.
func (c *Client) Providers(ctx context.Context, opts ListOptions) ([]schema.Provider, error) {
	return listOf[schema.Provider](ctx, c, ProvidersPath, opts)
}

// Provider gets one provider module by its class.
func (c *Client) Provider(ctx context.Context, name string) (*schema.Provider, error) {
	return getOf[schema.Provider](ctx, c, ProviderPath(name))
}

// Commits lists the recorded commits, newest first.
func (c *Client) Commits(ctx context.Context, opts ListOptions) ([]schema.Commit, error) {
	return listOf[schema.Commit](ctx, c, CommitsPath, opts)
}

// Commit gets one commit by its revision or a unique prefix of at least 7
// characters.
func (c *Client) Commit(ctx context.Context, rev string) (*schema.Commit, error) {
	return getOf[schema.Commit](ctx, c, CommitPath(rev))
}

// Kubeconfig downloads an admin kubeconfig of a tenant's cluster. It needs
// an admin token.
func (c *Client) Kubeconfig(ctx context.Context, tenant string) ([]byte, error) {
	return c.GetBytes(ctx, KubeconfigPath(tenant))
}

// Talosconfig downloads a talosconfig of a tenant's control plane. It
// needs an admin token.
func (c *Client) Talosconfig(ctx context.Context, tenant string) ([]byte, error) {
	return c.GetBytes(ctx, TalosconfigPath(tenant))
}

// Version is the body of /version.
type Version struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion,omitempty"`
	Platform  string `json:"platform,omitempty"`
}

// ServerVersion asks the server for its version.
func (c *Client) ServerVersion(ctx context.Context) (*Version, error) {
	return getOf[Version](ctx, c, VersionPath)
}

// Status is the body of /api/v1/status (see api.Status). Raw keeps the
// whole body, members this client does not know included.
type Status struct {
	api.Status
	Raw json.RawMessage `json:"-"`
}

// Status asks the server for its status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var raw json.RawMessage
	if err := c.Get(ctx, StatusPath, &raw); err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	s.Raw = raw
	return &s, nil
}
