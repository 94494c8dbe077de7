package talos

import (
	"slices"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// InputFor builds the ConfigInput of one node group of a loaded tenant: the
// tenant's cluster settings, the node group's role and Talos version (else
// the tenant's), the CNI plugin type, and the patches in the documented
// order, each with the file:line where the manifests declare it:
//
//  1. the tenant's spec.configPatches, in spec order;
//  2. the tenant's ConfigPatch resources without a targetRole;
//  3. its ConfigPatch resources whose targetRole is the node group's role;
//  4. the node group's spec.configPatches, in spec order.
//
// ConfigPatch resources keep the order of td.Patches (by name, as
// schema.Load sorts them). Mode, InstallDisk and Now are left for the caller.
func InputFor(td *schema.TenantDesired, ng *schema.NodeGroup, secretsBundle []byte) ConfigInput {
	t := td.Tenant
	role := ng.Role()
	in := ConfigInput{
		ClusterName:          t.Metadata.Name,
		ControlPlaneEndpoint: t.Spec.ControlPlaneEndpoint,
		KubernetesVersion:    t.Spec.KubernetesVersion,
		TalosVersion:         t.Spec.TalosVersion,
		PodNetwork:           t.Spec.PodNetwork,
		ServiceNetwork:       t.Spec.ServiceNetwork,
		Role:                 role,
		Secrets:              secretsBundle,
	}
	if ng.Spec.TalosVersion != "" {
		in.TalosVersion = ng.Spec.TalosVersion
	}
	if cni := t.Spec.Plugins.CNI; cni != nil {
		in.CNI = cni.Type
	}
	in.Patches = append(in.Patches, namedPatches(t.Spec.ConfigPatches, t.Source)...)
	roles := []string{""}
	if role != "" {
		roles = append(roles, role)
	}
	for _, wantRole := range roles {
		for _, cp := range td.Patches {
			if cp.Spec.TargetRole == wantRole {
				ptr := schema.JSONPointer("spec", "patch")
				in.Patches = append(in.Patches, Patch{
					Name:      cp.Metadata.Name,
					Patch:     cp.Spec.Patch,
					Source:    cp.Source.Position(ptr),
					Encrypted: encryptedAt(cp.Source, ptr),
				})
			}
		}
	}
	in.Patches = append(in.Patches, namedPatches(ng.Spec.ConfigPatches, ng.Source)...)
	return in
}

// namedPatches turns a spec's configPatches into Patches that point at the
// patch text of each.
func namedPatches(ps []schema.NamedPatch, src schema.Source) []Patch {
	out := make([]Patch, 0, len(ps))
	for i, p := range ps {
		ptr := schema.JSONPointer("spec", "configPatches", strconv.Itoa(i), "patch")
		out = append(out, Patch{
			Name:      p.Name,
			Patch:     p.Patch,
			Source:    src.Position(ptr),
			Encrypted: encryptedAt(src, ptr),
		})
	}
	return out
}

// encryptedAt reports whether a value at or under ptr was SOPS-encrypted.
func encryptedAt(src schema.Source, ptr string) bool {
	return slices.ContainsFunc(src.Encrypted, func(e string) bool { return e == ptr || strings.HasPrefix(e, ptr+"/") })
}
