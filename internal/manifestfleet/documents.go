package manifestfleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// schemaComment is the line that points editors (yaml-language-server)
// at the Tenant's JSON Schema.
const schemaComment = "# yaml-language-server: $schema=../schema/tenant.schema.json\n"

// tenantDocument is the YAML of t's Tenant.
func (t Tenant) tenantDocument(comment bool) string {
	var b strings.Builder
	if comment {
		b.WriteString(schemaComment)
	}
	fmt.Fprintf(&b, "apiVersion: rezuscloud.io/v1\nkind: Tenant\nmetadata:\n  name: %s\n", t.Name)
	if len(t.Labels) > 0 {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(t.Labels)) {
			labels = append(labels, k+": "+t.Labels[k])
		}
		fmt.Fprintf(&b, "  labels: {%s}\n", strings.Join(labels, ", "))
	}
	b.WriteString("spec:\n")
	for _, f := range [][2]string{{"kubernetesVersion", t.KubernetesVersion}, {"talosVersion", t.TalosVersion}} {
		if f[1] != "" {
			fmt.Fprintf(&b, "  %s: %q\n", f[0], f[1])
		}
	}
	if t.Endpoint != "" {
		fmt.Fprintf(&b, "  controlPlaneEndpoint: %s\n", t.Endpoint)
	}
	for _, f := range []struct {
		key  string
		list []string
	}{{"podNetwork", t.PodNetwork}, {"serviceNetwork", t.ServiceNetwork}} {
		if len(f.list) > 0 {
			fmt.Fprintf(&b, "  %s: [%s]\n", f.key, strings.Join(f.list, ", "))
		}
	}
	if t.CNI != "" {
		fmt.Fprintf(&b, "  plugins:\n    cni: {type: %s}\n", t.CNI)
	}
	if t.ServiceAccountKey != "" {
		fmt.Fprintf(&b, "  serviceAccountKey: %s\n", t.ServiceAccountKey)
	}
	writeInline(&b, t.Patches)
	return b.String()
}

// groupDocument is the YAML of g, a NodeGroup of tenant.
func groupDocument(tenant string, g Group) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: rezuscloud.io/v1\nkind: NodeGroup\nmetadata:\n  name: %s\n  labels:\n    rezuscloud.io/tenant: %s\n    rezuscloud.io/role: %s\nspec:\n  count: %d\n",
		g.Name, tenant, g.Role, g.Count)
	if g.ProviderClass != "" {
		fmt.Fprintf(&b, "  providerClass: %s\n", g.ProviderClass)
	}
	if g.ProviderConfig != "" {
		b.WriteString("  providerConfig:\n" + indent(g.ProviderConfig, "    "))
	}
	writeInline(&b, g.Patches)
	return b.String()
}

// patchDocument is the YAML of p, a ConfigPatch of tenant.
func patchDocument(tenant string, p Patch) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: rezuscloud.io/v1\nkind: ConfigPatch\nmetadata:\n  name: %s\n  labels:\n    rezuscloud.io/tenant: %s\nspec:\n", p.Name, tenant)
	if p.TargetRole != "" {
		fmt.Fprintf(&b, "  targetRole: %s\n", p.TargetRole)
	}
	b.WriteString("  patch: |\n" + indent(p.Text, "    "))
	return b.String()
}

// writeInline writes patches as a spec's configPatches.
func writeInline(b *strings.Builder, patches []Patch) {
	if len(patches) == 0 {
		return
	}
	b.WriteString("  configPatches:\n")
	for _, p := range patches {
		fmt.Fprintf(b, "    - name: %s\n      patch: |\n%s", p.Name, indent(p.Text, "        "))
	}
}

// indent puts prefix before every line of text that is not empty, and
// ends it with a newline.
func indent(text, prefix string) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
