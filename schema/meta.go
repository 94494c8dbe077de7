package schema

import (
	"strings"
	"time"
)

// APIVersion is the apiVersion of every RezusCloud kind.
const APIVersion = "rezuscloud.io/v1"

// Group is the API group of the RezusCloud kinds: the part of APIVersion before
// the slash.
const Group = "rezuscloud.io"

// Kind names. Tenant, NodeGroup and ConfigPatch are declared in git; Machine,
// Provider and Commit are served by the API only.
const (
	KindTenant      = "Tenant"
	KindNodeGroup   = "NodeGroup"
	KindConfigPatch = "ConfigPatch"
	KindMachine     = "Machine"
	KindProvider    = "Provider"
	KindCommit      = "Commit"
)

// Labels that tie objects together, and the roles a machine can have.
const (
	// LabelTenant names the tenant a node group, config patch or machine
	// belongs to (see TenantOf).
	LabelTenant = "rezuscloud.io/tenant"
	// LabelRole names the role of a node group or machine.
	LabelRole = "rezuscloud.io/role"
	// LabelNodeGroup names the node group of a machine.
	LabelNodeGroup = "rezuscloud.io/node-group"
	// LabelProvider names the provider class of a machine.
	LabelProvider = "rezuscloud.io/provider"
	// LabelPreview marks the Commits of preview runs.
	LabelPreview = "rezuscloud.io/preview"
	// LabelZone is the availability zone (or domain) of a machine on a
	// cloud that has them.
	LabelZone = "topology.kubernetes.io/zone"
	// AnnotationPublicAddress and AnnotationProviderState carry a
	// machine's public IP and its cloud's state of it, when the provider
	// records them.
	AnnotationPublicAddress = "rezuscloud.io/public-address"
	AnnotationProviderState = "rezuscloud.io/provider-state"
	// AnnotationRestartedAt on a Tenant or NodeGroup (an RFC 3339 time)
	// reboots its machines one at a time, once per distinct value, as
	// kubectl rollout restart does.
	AnnotationRestartedAt = "rezuscloud.io/restartedAt"

	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Roles lists the known machine roles in a fixed order.
var Roles = []string{RoleControlPlane, RoleWorker}

// Provider classes a NodeGroup can name in spec.providerClass.
const (
	ProviderSim       = "sim"
	ProviderOCI       = "oci"
	ProviderOpenStack = "openstack"
	ProviderMetal     = "metal"
)

// ProviderClasses lists the known provider classes in a fixed order.
var ProviderClasses = []string{ProviderSim, ProviderOCI, ProviderOpenStack, ProviderMetal}

// Finalizers the server puts on a tenant that has been removed from git, and
// clears once the tenant's machines and secrets are gone.
const (
	FinalizerMachines = "rezuscloud.io/machines"
	FinalizerSecrets  = "rezuscloud.io/secrets"
)

// ObjectMeta is the metadata every resource carries. In manifests only name,
// labels and annotations may be set; the server fills in the rest.
type ObjectMeta struct {
	Name            string `json:"name"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Generation counts the versions of what a tenant is rendered from:
	// 1 for its first manifests, one more whenever its manifests (or the
	// server version that renders them) change. Only tenants have one.
	Generation        int64             `json:"generation,omitempty"`
	CreatedAt         time.Time         `json:"createdAt,omitzero"`
	UpdatedAt         time.Time         `json:"updatedAt,omitzero"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
	Finalizers        []string          `json:"finalizers,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// Declared returns what a manifest may set of m: its name, labels and
// annotations.
func (m ObjectMeta) Declared() ObjectMeta {
	return ObjectMeta{Name: m.Name, Labels: m.Labels, Annotations: m.Annotations}
}

// NamedPatch is a Talos machine config patch with a name, carried inside a
// Tenant or NodeGroup spec.
type NamedPatch struct {
	Name string `json:"name"`
	// Patch is YAML text: a strategic merge patch (a mapping, possibly several
	// documents) or a JSON 6902 patch (a list of operations). A manifest may
	// write it as a YAML string or as a plain mapping; Load turns a mapping
	// into YAML text with sorted keys.
	Patch string `json:"patch"`
}

// JSONPointer joins tokens into an RFC 6901 JSON pointer, escaping each.
func JSONPointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

func escapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	t = strings.ReplaceAll(t, "~", "~0")
	return strings.ReplaceAll(t, "/", "~1")
}
