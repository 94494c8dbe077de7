package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// resourceType is one kind the API serves, as get, describe and watch
// name it and print it.
type resourceType struct {
	// name is the canonical plural the commands print; aliases are the
	// other words that select it.
	name    string
	aliases []string
	kind    string
	// scoped kinds live inside a tenant: their API names are
	// TENANT/NAME, and a NAME lookup needs the tenant.
	scoped bool
	// listPath is the list of a tenant's objects, or of every object
	// when tenant is "" (nil for scoped kinds, which have no such list).
	listPath func(tenant string) string
	// getPath is one object; tenant is "" for unscoped kinds unless the
	// user named one.
	getPath func(tenant, name string) string
	// columns and row make the table; wide adds columns.
	columns func(wide bool) []string
	row     func(raw json.RawMessage, wide bool, now time.Time) ([]string, error)
}

var resourceTypes = []*resourceType{
	{
		name: "tenants", aliases: []string{"tenant", "tn"}, kind: schema.KindTenant,
		listPath: func(string) string { return client.TenantsPath },
		getPath:  func(_, name string) string { return client.TenantPath(name) },
		columns: func(wide bool) []string {
			if wide {
				return []string{"NAME", "PHASE", "MACHINES", "READY", "VERSION", "TALOS", "ENDPOINT", "AGE", "CONDITION", "BACKUP", "STATUS"}
			}
			return []string{"NAME", "PHASE", "MACHINES", "VERSION", "AGE", "READY", "BACKUP", "STATUS"}
		},
		row: tenantRow,
	},
	{
		name: "nodegroups", aliases: []string{"nodegroup", "ng", "ngs", "node-groups", "node-group"}, kind: schema.KindNodeGroup, scoped: true,
		getPath: func(tenant, name string) string { return client.NodeGroupPath(tenant, name) },
		columns: func(wide bool) []string {
			if wide {
				return []string{"TENANT", "NAME", "ROLE", "COUNT", "MACHINES", "READY", "PROVIDER", "SHAPE", "AGE"}
			}
			return []string{"TENANT", "NAME", "ROLE", "COUNT", "MACHINES", "PROVIDER", "AGE"}
		},
		row: nodeGroupRow,
	},
	{
		name: "machines", aliases: []string{"machine", "m"}, kind: schema.KindMachine,
		listPath: func(tenant string) string {
			if tenant == "" {
				return client.MachinesPath
			}
			return client.TenantMachinesPath(tenant)
		},
		getPath: client.MachinePath,
		columns: func(wide bool) []string {
			if wide {
				return []string{"NAME", "TENANT", "NODEGROUP", "ROLE", "STAGE", "ADDRESS", "HOSTNAME", "SHAPE", "TALOS", "CONFIG", "NODE",
					"CPU", "MEMORY", "DISK", "SCHEMATIC", "AGE"}
			}
			return []string{"NAME", "TENANT", "NODEGROUP", "ROLE", "STAGE", "ADDRESS", "AGE"}
		},
		row: machineRow,
	},
	{
		name: "patches", aliases: []string{"patch", "cp", "configpatches", "configpatch", "config-patches"}, kind: schema.KindConfigPatch, scoped: true,
		getPath: func(tenant, name string) string { return client.PatchPath(tenant, name) },
		columns: func(bool) []string { return []string{"TENANT", "NAME", "TARGET", "MACHINES", "AGE"} },
		row:     patchRow,
	},
	{
		name: "providers", aliases: []string{"provider"}, kind: schema.KindProvider,
		listPath: func(string) string { return client.ProvidersPath },
		getPath:  func(_, name string) string { return client.ProviderPath(name) },
		columns: func(wide bool) []string {
			if wide {
				return []string{"NAME", "SOURCE", "MAPPINGS", "VERSION", "BUILTIN", "AVAILABLE"}
			}
			return []string{"NAME", "SOURCE", "MAPPINGS"}
		},
		row: providerRow,
	},
	{
		name: "commits", aliases: []string{"commit"}, kind: schema.KindCommit,
		listPath: func(string) string { return client.CommitsPath },
		getPath:  func(_, name string) string { return client.CommitPath(name) },
		columns: func(wide bool) []string {
			if wide {
				return []string{"SHA", "PHASE", "TENANTS", "AUTHOR", "AGE", "REF", "PREVIEW", "MESSAGE"}
			}
			return []string{"SHA", "PHASE", "TENANTS", "AUTHOR", "AGE", "MESSAGE"}
		},
		row: commitRow,
	},
}

// lookupType finds the resource type a word names.
func lookupType(word string) (*resourceType, error) {
	w := strings.ToLower(word)
	for _, rt := range resourceTypes {
		if w == rt.name || slices.Contains(rt.aliases, w) {
			return rt, nil
		}
	}
	return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("unknown resource type %q: use one of %s", word, typeNames())}
}

func typeNames() string {
	var names []string
	for _, rt := range resourceTypes {
		names = append(names, rt.name)
	}
	return strings.Join(names, ", ")
}

// singular is the lower-case kind, as `-o name` prints it.
func (rt *resourceType) singular() string { return strings.ToLower(rt.kind) }

// header is the part of every object that the commands need besides the
// kind-specific columns.
type header struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		CreatedAt time.Time         `json:"createdAt"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Tenant string `json:"tenant"`
	} `json:"spec"`
}

func decodeHeader(raw json.RawMessage) (header, error) {
	var h header
	err := json.Unmarshal(raw, &h)
	return h, err
}

// tenantOf is the tenant an object belongs to: its tenant label or, for
// machines without one, spec.tenant.
func (h header) tenantOf() string {
	if t := h.Metadata.Labels[schema.LabelTenant]; t != "" {
		return t
	}
	return h.Spec.Tenant
}

// displayName is how `-o name` names an object: kind/NAME, with the
// tenant for scoped kinds.
func (rt *resourceType) displayName(raw json.RawMessage) string {
	h, _ := decodeHeader(raw)
	if rt.scoped {
		return rt.singular() + "/" + h.tenantOf() + "/" + h.Metadata.Name
	}
	return rt.singular() + "/" + h.Metadata.Name
}

func decodeAs[T any](raw json.RawMessage) (*T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func tenantRow(raw json.RawMessage, wide bool, now time.Time) ([]string, error) {
	t, err := decodeAs[schema.Tenant](raw)
	if err != nil {
		return nil, err
	}
	m := t.Status.Machines
	phase := string(t.Status.Phase)
	if t.Metadata.DeletionTimestamp != nil && phase == "" {
		phase = string(schema.TenantRemoving)
	}
	row := []string{t.Metadata.Name, orNone(phase), fmt.Sprintf("%d/%d", m.Total, m.Desired)}
	if wide {
		row = append(row, fmt.Sprintf("%d/%d", m.Ready, m.Total))
	}
	row = append(row, orNone(t.Spec.KubernetesVersion))
	if wide {
		row = append(row, orNone(t.Spec.TalosVersion), orNone(t.Spec.ControlPlaneEndpoint))
	}
	ready, _ := readyColumns(t.Status.Conditions)
	return append(row, age(t.Metadata.CreatedAt, now), ready, backupWord(t, now), tenantStatus(t.Status, now)), nil
}

// tenantStatus is the STATUS column of a tenant: what holds it back, at a
// glance. A true Suspended, Stalled or Drifted condition comes first,
// then a pending retry, then work that waits for a maintenance window,
// then a rollout through its machines ("Upgrading: machine 4 of 6
// (prod-cp-2 restarting)"), then work in progress (Reconciling), else
// the Ready condition's message.
func tenantStatus(st schema.TenantStatus, now time.Time) string {
	cs := st.Conditions
	for _, typ := range []string{schema.ConditionSuspended, schema.ConditionStalled, schema.ConditionDrifted} {
		if c := cs.Get(typ); c != nil && c.Status == schema.ConditionTrue {
			return firstLine(typ+": "+cmp.Or(c.Message, c.Reason), 80)
		}
	}
	if r := st.Retry; r != nil {
		wait := "now"
		if d := r.NextAttemptAt.Sub(now); d > 0 {
			wait = "in " + d.Round(time.Second).String()
		}
		return fmt.Sprintf("Retrying: attempt %d failed (%s), next %s", r.Attempts, r.LastReason, wait)
	}
	if m := st.Maintenance; m != nil {
		return firstLine(fmt.Sprintf("Waiting for window %s (in %s): %s", m.NextWindow.UTC().Format("2006-01-02T15:04Z"),
			max(m.NextWindow.Sub(now), 0).Round(time.Minute), m.Waiting), 100)
	}
	if r := st.Rollout; r != nil {
		return firstLine("Upgrading: "+r.String(), 100)
	}
	if c := cs.Get(schema.ConditionReconciling); c != nil && c.Status == schema.ConditionTrue {
		return firstLine("Reconciling: "+cmp.Or(c.Message, c.Reason), 80)
	}
	_, msg := readyColumns(cs)
	return msg
}

// nodeGroupStatus says what a node group is doing, at a glance: its part
// of a rollout while its Upgrading condition is true, else its Ready
// condition's message.
func nodeGroupStatus(cs schema.Conditions) string {
	if c := cs.Get(schema.ConditionUpgrading); c != nil && c.Status == schema.ConditionTrue {
		return firstLine("Upgrading: "+cmp.Or(c.Message, c.Reason), 100)
	}
	_, msg := readyColumns(cs)
	return msg
}

// readyColumns are the READY and STATUS columns of an object with
// conditions, as flux prints them: the Ready condition's status and its
// message.
func readyColumns(cs schema.Conditions) (string, string) {
	c := cs.Get(schema.ConditionReady)
	if c == nil {
		return string(schema.ConditionUnknown), "<none>"
	}
	return string(c.Status), orNone(firstLine(c.Message, 80))
}

func nodeGroupRow(raw json.RawMessage, wide bool, now time.Time) ([]string, error) {
	g, err := decodeAs[schema.NodeGroup](raw)
	if err != nil {
		return nil, err
	}
	m := g.Status.Machines
	row := []string{orNone(g.Tenant()), g.Metadata.Name, orNone(g.Role()), strconv.Itoa(g.Spec.Count), strconv.Itoa(m.Total)}
	if wide {
		row = append(row, fmt.Sprintf("%d/%d", m.Ready, m.Total))
	}
	row = append(row, orNone(g.Spec.ProviderClass))
	if wide {
		shape, _ := g.Spec.ProviderConfig["shape"].(string)
		row = append(row, orNone(shape))
	}
	return append(row, age(g.Metadata.CreatedAt, now)), nil
}

func machineRow(raw json.RawMessage, wide bool, now time.Time) ([]string, error) {
	m, err := decodeAs[schema.Machine](raw)
	if err != nil {
		return nil, err
	}
	row := []string{m.Metadata.Name, orNone(m.Spec.Tenant), orNone(m.Spec.NodeGroup), orNone(m.Spec.Role), orNone(string(m.Status.Stage)), orNone(m.Spec.ManagementAddress)}
	if wide {
		row = append(row, orNone(m.Spec.Hostname), orNone(m.Spec.Shape), orNone(m.Status.TalosVersion), configWord(m.Status), nodeWord(m.Status.Kubernetes))
		row = append(row, hardwareCells(m.Status.Hardware)...)
		row = append(row, schematicCell(m.Status.Schematic))
	}
	return append(row, age(m.Metadata.CreatedAt, now)), nil
}

// hardwareCells are a machine's CPU, MEMORY and DISK columns: its
// hardware threads, its memory and its system disk in binary units as
// kubectl prints quantities (8Gi); <none> for what it has not told.
func hardwareCells(h *schema.MachineHardware) []string {
	cells := []string{"<none>", "<none>", "<none>"}
	if h == nil {
		return cells
	}
	if h.CPUs > 0 {
		cells[0] = strconv.Itoa(h.CPUs)
	}
	if h.MemoryMiB > 0 {
		cells[1] = quantity(uint64(h.MemoryMiB) << 20)
	}
	for _, d := range h.BlockDevices {
		if d.SystemDisk {
			cells[2] = quantity(d.SizeBytes)
		}
	}
	return cells
}

// quantity prints a size in Gi (or Mi below 1Gi), rounded down, as the
// derived labels hardware.rezuscloud.io/memory-gib and system-disk-gib
// count.
func quantity(n uint64) string {
	if n < 1<<30 {
		return strconv.FormatUint(n>>20, 10) + "Mi"
	}
	return strconv.FormatUint(n>>30, 10) + "Gi"
}

// schematicIDLen is how much of a schematic ID the SCHEMATIC column shows.
const schematicIDLen = 8

// schematicCell is a machine's image schematic, its ID cut short.
func schematicCell(s *schema.MachineSchematic) string {
	if s == nil || s.ID == "" {
		return "<none>"
	}
	return s.ID[:min(len(s.ID), schematicIDLen)]
}

// configWord says whether a machine runs the config rendered for it, as
// its Talos API last told: current, outdated, or unknown when it was not
// reached.
func configWord(st schema.MachineStatus) string {
	switch {
	case st.ConfigUpToDate:
		return "current"
	case st.Connected:
		return "outdated"
	}
	return "unknown"
}

// nodeWord is the machine's Node as kubectl shows its status: Ready or
// NotReady, with SchedulingDisabled while it is cordoned; <none> while the
// tenant's Kubernetes API has not shown one.
func nodeWord(k *schema.MachineKubernetes) string {
	if k == nil {
		return "<none>"
	}
	w := "NotReady"
	if k.Ready {
		w = "Ready"
	}
	if !k.Schedulable {
		w += ",SchedulingDisabled"
	}
	return w
}

func patchRow(raw json.RawMessage, _ bool, now time.Time) ([]string, error) {
	p, err := decodeAs[schema.ConfigPatch](raw)
	if err != nil {
		return nil, err
	}
	target := p.Spec.TargetRole
	if target == "" {
		target = "all"
	}
	return []string{orNone(p.Tenant()), p.Metadata.Name, target, strconv.Itoa(p.Status.Machines), age(p.Metadata.CreatedAt, now)}, nil
}

func providerRow(raw json.RawMessage, wide bool, _ time.Time) ([]string, error) {
	p, err := decodeAs[schema.Provider](raw)
	if err != nil {
		return nil, err
	}
	var maps []string
	for _, m := range p.Spec.Mappings {
		maps = append(maps, m.TFType+"="+m.Kind)
	}
	row := []string{p.Metadata.Name, orNone(p.Spec.Source), orNone(strings.Join(maps, ","))}
	if wide {
		row = append(row, orNone(p.Spec.Version), strconv.FormatBool(p.Spec.Builtin), strconv.FormatBool(p.Status.Available))
	}
	return row, nil
}

func commitRow(raw json.RawMessage, wide bool, now time.Time) ([]string, error) {
	c, err := decodeAs[schema.Commit](raw)
	if err != nil {
		return nil, err
	}
	row := []string{shortSHA(c.Spec.SHA, c.Metadata.Name), orNone(string(c.Status.Phase)), commitTenants(c), orNone(c.Spec.Author), age(c.Metadata.CreatedAt, now)}
	if wide {
		row = append(row, orNone(c.Spec.Ref), strconv.FormatBool(c.Spec.Preview))
	}
	return append(row, orNone(firstLine(c.Spec.Message, 60))), nil
}

// shortSHA is the first 12 characters of a revision; a directory's
// content hash ("sha256:…") loses its prefix, which the API also accepts
// left out.
func shortSHA(sha, name string) string {
	if sha == "" {
		sha = name
	}
	sha = strings.TrimPrefix(strings.TrimPrefix(sha, "sha256:"), "sha256-")
	if len(sha) > 12 {
		sha = sha[:12]
	}
	return sha
}

// commitTenants summarizes a commit's tenant results in one cell:
// "production machines +5, other +1, bootstrap on prod-cp-0; staging ok".
func commitTenants(c *schema.Commit) string {
	if len(c.Status.Tenants) == 0 {
		if n := len(c.Status.Problems); n > 0 {
			return fmt.Sprintf("%d problems", n)
		}
		return "<none>"
	}
	parts := make([]string, 0, len(c.Status.Tenants))
	for _, r := range c.Status.Tenants {
		parts = append(parts, r.Tenant+" "+resultWord(r))
	}
	return strings.Join(parts, "; ")
}

// resultWord is a tenant result in a word, or what it changed: the plan,
// machines apart from other resources, and what the Talos plane did.
func resultWord(r schema.TenantResult) string {
	switch r.Phase {
	case schema.CommitSucceeded:
		if did := resultChanges(r); did != "" {
			return did
		}
		return "ok"
	case schema.CommitFailed:
		return "failed"
	case "":
		return "pending"
	}
	return strings.ToLower(string(r.Phase))
}

// resultChanges says what a run changed: its plan (PlanSummary.Text) and
// what the Talos plane did; "" for nothing.
func resultChanges(r schema.TenantResult) string {
	var parts []string
	if r.Plan != (schema.PlanSummary{}) {
		parts = append(parts, r.Plan.Text())
	}
	if plane := planeText(r.Plane); plane != "" {
		parts = append(parts, plane)
	}
	return strings.Join(parts, ", ")
}

// firstLine is the first line of s, cut to n runes with "..." when longer.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// errorSummary is a multi-line error (tofu's) in one line: its first line
// and, when tofu's diagnostics follow, the first "Error: " line's text.
func errorSummary(s string, n int) string {
	first := firstLine(s, 1<<20)
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "Error: "); ok && rest != "" {
			first += ": " + rest
			break
		}
	}
	return firstLine(first, n)
}

// age formats how long ago t was as kubectl does: 45s, 5m30s, 90m, 3h20m,
// 26h, 3d4h, 45d, 2y30d. A zero t is "<unknown>".
func age(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return humanDuration(now.Sub(t))
}

func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	seconds := int(d.Round(time.Second) / time.Second)
	switch {
	case seconds < 60*2:
		return fmt.Sprintf("%ds", seconds)
	}
	minutes := int(d / time.Minute)
	switch {
	case minutes < 10:
		if s := seconds % 60; s != 0 {
			return fmt.Sprintf("%dm%ds", minutes, s)
		}
		return fmt.Sprintf("%dm", minutes)
	case minutes < 60*3:
		return fmt.Sprintf("%dm", minutes)
	}
	hours := int(d / time.Hour)
	switch {
	case hours < 8:
		if m := minutes % 60; m != 0 {
			return fmt.Sprintf("%dh%dm", hours, m)
		}
		return fmt.Sprintf("%dh", hours)
	case hours < 48:
		return fmt.Sprintf("%dh", hours)
	case hours < 24*8:
		if h := hours % 24; h != 0 {
			return fmt.Sprintf("%dd%dh", hours/24, h)
		}
		return fmt.Sprintf("%dd", hours/24)
	case hours < 24*365*2:
		return fmt.Sprintf("%dd", hours/24)
	case hours < 24*365*8:
		if dd := hours / 24 % 365; dd != 0 {
			return fmt.Sprintf("%dy%dd", hours/24/365, dd)
		}
		return fmt.Sprintf("%dy", hours/24/365)
	}
	return fmt.Sprintf("%dy", hours/24/365)
}
