package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// describeCommits is how many recent commits describe reads to find a
// tenant's events and last result; describeEvents is how many it shows.
const (
	describeCommits = 100
	describeEvents  = 10
)

func newDescribeCmd() *cobra.Command {
	var tenant string
	kinds := []string{schema.KindTenant, schema.KindNodeGroup, schema.KindMachine, schema.KindConfigPatch, schema.KindCommit}
	cmd := &cobra.Command{
		Use:   "describe TYPE NAME",
		Short: "Show a tenant, node group, machine, patch or commit in detail",
		Long: `Describe shows one object in detail: its metadata, spec and status, and what
belongs to it. For a tenant (and a node group) it also shows the outcome of
the tenant's last tofu run and the recent commits that ran it (Events). For
a commit it shows each tenant's result, the validation problems of an
invalid commit, and the end of tofu's output for tenants that failed.

TYPE is tenant (tn), nodegroup (ng), machine (m), patch (cp) or commit.
Node groups and patches live in a tenant: give --tenant/-t or TENANT/NAME.`,
		Example: `  rezusctl describe tenant production
  rezusctl describe ng production/workers
  rezusctl describe machine sim-25b33181a5738e00
  rezusctl describe commit 3f2a9c1`,
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 1 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeFor(cmd, args, toComplete, kinds)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return &exitError{code: exitUsage, msg: "give a type and a NAME: rezusctl describe tenant|nodegroup|machine|patch|commit NAME"}
			}
			rt, err := lookupType(args[0])
			if err != nil {
				return err
			}
			if !slices.Contains(kinds, rt.kind) {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("describe does not show %s; use rezusctl get %s %s -o yaml", rt.name, rt.name, args[1])}
			}
			if tenant != "" && rt.kind == schema.KindTenant {
				return &exitError{code: exitUsage, msg: "--tenant does not apply to tenants"}
			}
			targets, err := parseNames(rt, tenant, args[1:])
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			d := &describer{c: c, now: time.Now()}
			var text string
			switch rt.kind {
			case schema.KindTenant:
				text, err = d.tenant(cmd.Context(), targets[0].name)
			case schema.KindNodeGroup:
				text, err = d.nodeGroup(cmd.Context(), targets[0].tenant, targets[0].name)
			case schema.KindConfigPatch:
				text, err = d.patch(cmd.Context(), targets[0].tenant, targets[0].name)
			case schema.KindMachine:
				text, err = d.machine(cmd.Context(), targets[0].tenant, targets[0].name)
			case schema.KindCommit:
				text, err = d.commit(cmd.Context(), targets[0].name)
			}
			if err != nil {
				return apiError(err)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), text)
			return usageError(err)
		},
	}
	cmd.Flags().StringVarP(&tenant, "tenant", "t", "", "the tenant of the node group, patch or machine")
	registerCompletions(cmd)
	return cmd
}

// describer reads what describe shows and writes it in kubectl describe's
// layout: "Key:  value" lines, indented two spaces per level, aligned.
type describer struct {
	c   *client.Client
	now time.Time

	buf strings.Builder
	tw  *tabwriter.Writer
}

func (d *describer) start() {
	d.buf.Reset()
	d.tw = tabwriter.NewWriter(&d.buf, 0, 8, 2, ' ', 0)
}

func (d *describer) done() string {
	d.tw.Flush()
	return d.buf.String()
}

// line writes one line at an indentation level; tabs separate the cells
// that are aligned.
func (d *describer) line(level int, format string, args ...any) {
	fmt.Fprintf(d.tw, strings.Repeat("  ", level)+format+"\n", args...)
}

// kv writes "key:\tvalue", <none> for an empty value.
func (d *describer) kv(level int, key, value string) {
	d.line(level, "%s:\t%s", key, orNone(value))
}

// text writes a multi-line value under its key, indented.
func (d *describer) text(level int, key, value string) {
	if !strings.Contains(strings.TrimRight(value, "\n"), "\n") {
		d.kv(level, key, strings.TrimSpace(value))
		return
	}
	d.line(level, "%s:", key)
	for _, l := range strings.Split(strings.TrimRight(value, "\n"), "\n") {
		d.line(level+1, "%s", l)
	}
}

func (d *describer) when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339) + " (" + humanDuration(d.now.Sub(t)) + " ago)"
}

// until says when a future time is: "2025-01-02T03:04:05Z (in 8s)".
func (d *describer) until(t time.Time) string {
	if !t.After(d.now) {
		return d.when(t)
	}
	return t.UTC().Format(time.RFC3339) + " (in " + humanDuration(t.Sub(d.now)) + ")"
}

// retry says when a failing tenant runs again, and why it failed.
func (d *describer) retry(r *schema.RetryStatus) string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("attempt %d failed (%s); next attempt %s", r.Attempts, r.LastReason, d.until(r.NextAttemptAt))
}

// retries lists the failed tenants of a commit that run again by
// themselves, and when.
func (d *describer) retries(results []schema.TenantResult) {
	var rows []string
	for _, r := range results {
		if !r.NextAttemptAt.IsZero() {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s", r.Tenant, orNone(r.Reason), d.until(r.NextAttemptAt)))
		}
	}
	if len(rows) == 0 {
		return
	}
	d.line(0, "Retries:")
	d.line(1, "TENANT\tREASON\tNEXT ATTEMPT")
	for _, r := range rows {
		d.line(1, "%s", r)
	}
}

// conditions writes a Conditions table, as kubectl describe does.
func (d *describer) conditions(cs schema.Conditions) {
	if len(cs) == 0 {
		d.kv(0, "Conditions", "")
		return
	}
	d.line(0, "Conditions:")
	d.line(1, "Type\tStatus\tReason\tAge\tMessage")
	for _, c := range cs {
		d.line(1, "%s\t%s\t%s\t%s\t%s", c.Type, c.Status, orNone(c.Reason), age(c.LastTransitionTime, d.now), orNone(firstLine(c.Message, 120)))
	}
}

func joinMap(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func (d *describer) meta(m schema.ObjectMeta) {
	d.kv(0, "Labels", joinMap(m.Labels))
	d.kv(0, "Annotations", joinMap(m.Annotations))
	d.kv(0, "Created", d.when(m.CreatedAt))
	if !m.UpdatedAt.IsZero() {
		d.kv(0, "Updated", d.when(m.UpdatedAt))
	}
	if m.DeletionTimestamp != nil {
		d.kv(0, "Deleting Since", d.when(*m.DeletionTimestamp))
		d.kv(0, "Finalizers", strings.Join(m.Finalizers, ","))
	}
}

func patchNames(ps []schema.NamedPatch) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return strings.Join(names, ",")
}

func counts(m schema.MachineCounts) string {
	return fmt.Sprintf("%d of %d desired, %d ready", m.Total, m.Desired, m.Ready)
}

func (d *describer) tenant(ctx context.Context, name string) (string, error) {
	t, err := d.c.Tenant(ctx, name)
	if err != nil {
		return "", err
	}
	ngs, err := d.c.NodeGroups(ctx, name, client.ListOptions{})
	if err != nil {
		return "", err
	}
	patches, err := d.c.ConfigPatches(ctx, name, client.ListOptions{})
	if err != nil {
		return "", err
	}
	commits, err := d.c.Commits(ctx, client.ListOptions{Limit: describeCommits})
	if err != nil {
		return "", err
	}
	d.start()
	d.kv(0, "Name", t.Metadata.Name)
	d.meta(t.Metadata)
	d.line(0, "Spec:")
	s := t.Spec
	d.kv(1, "Kubernetes Version", s.KubernetesVersion)
	d.kv(1, "Talos Version", s.TalosVersion)
	d.kv(1, "Control Plane Endpoint", s.ControlPlaneEndpoint)
	d.kv(1, "Pod Network", strings.Join(s.PodNetwork, ","))
	d.kv(1, "Service Network", strings.Join(s.ServiceNetwork, ","))
	if cni := s.Plugins.CNI; cni != nil {
		d.kv(1, "CNI", strings.TrimSpace(cni.Type+" "+cni.Version))
	} else {
		d.kv(1, "CNI", "")
	}
	if csi := s.Plugins.CSI; csi != nil {
		d.kv(1, "CSI", csi.Type)
	} else {
		d.kv(1, "CSI", "")
	}
	d.kv(1, "Config Patches", patchNames(s.ConfigPatches))
	d.kv(1, "Backup", backupPolicyText(s.Backup))
	if s.Restore != nil {
		d.kv(1, "Restore", s.Restore.Backup)
	}
	st := t.Status
	d.line(0, "Status:")
	d.kv(1, "Phase", string(st.Phase))
	d.kv(1, "Available", strconv.FormatBool(st.Available))
	d.kv(1, "Ready", strconv.FormatBool(st.Ready))
	d.kv(1, "API Ready", strconv.FormatBool(st.APIReady))
	d.kv(1, "Control Plane Ready", strconv.FormatBool(st.ControlPlaneReady))
	d.kv(1, "Machines", counts(st.Machines))
	d.kv(1, "Control Plane", fmt.Sprintf("%d, %d ready", st.Machines.ControlPlane, st.Machines.ControlPlaneReady))
	d.kv(1, "Workers", fmt.Sprintf("%d, %d ready", st.Machines.Workers, st.Machines.Ready-st.Machines.ControlPlaneReady))
	if r := st.Rollout; r != nil {
		d.kv(1, "Rollout", r.String())
	}
	d.kv(1, "Observed Commit", st.ObservedCommit)
	d.kv(1, "Message", st.Message)
	d.kv(1, "Retry", d.retry(st.Retry))
	d.backupStatus(t)
	d.conditions(st.Conditions)
	if len(ngs) == 0 {
		d.kv(0, "Node Groups", "")
	} else {
		d.line(0, "Node Groups:")
		d.line(1, "NAME\tROLE\tCOUNT\tMACHINES\tREADY\tPROVIDER")
		for _, g := range ngs {
			m := g.Status.Machines
			d.line(1, "%s\t%s\t%d\t%d\t%d/%d\t%s", g.Metadata.Name, orNone(g.Role()), g.Spec.Count, m.Total, m.Ready, g.Spec.Count, orNone(g.Spec.ProviderClass))
		}
	}
	if len(patches) == 0 {
		d.kv(0, "Config Patches", "")
	} else {
		d.line(0, "Config Patches:")
		d.line(1, "NAME\tTARGET\tMACHINES")
		for _, p := range patches {
			target := p.Spec.TargetRole
			if target == "" {
				target = "all"
			}
			d.line(1, "%s\t%s\t%d", p.Metadata.Name, target, p.Status.Machines)
		}
	}
	d.lastResult(name, commits)
	d.events(name, commits)
	return d.done(), nil
}

// lastResult writes the tenant's result in the newest commit that ran it.
func (d *describer) lastResult(tenant string, commits []schema.Commit) {
	c, r := latestResult(tenant, commits)
	if r == nil {
		d.kv(0, "Last Result", "")
		return
	}
	d.line(0, "Last Result:")
	d.kv(1, "Commit", shortSHA(c.Spec.SHA, c.Metadata.Name))
	d.kv(1, "Phase", string(r.Phase))
	d.kv(1, "Plan", r.Plan.Text())
	d.kv(1, "Talos Plane", planeText(r.Plane))
	d.kv(1, "Started", d.when(r.StartedAt))
	d.kv(1, "Finished", d.when(r.FinishedAt))
	d.text(1, "Error", r.Error)
}

// latestResult finds the tenant's result in the newest commit (commits
// are newest first) that ran it; a superseded result ran nothing.
func latestResult(tenant string, commits []schema.Commit) (*schema.Commit, *schema.TenantResult) {
	for i := range commits {
		for j := range commits[i].Status.Tenants {
			r := &commits[i].Status.Tenants[j]
			if r.Tenant == tenant && r.Phase != schema.CommitSuperseded {
				return &commits[i], r
			}
		}
	}
	return nil, nil
}

// events lists the recent commits that ran the tenant.
func (d *describer) events(tenant string, commits []schema.Commit) {
	var rows []string
	for i := range commits {
		c := &commits[i]
		for _, r := range c.Status.Tenants {
			if r.Tenant != tenant {
				continue
			}
			msg := firstLine(c.Spec.Message, 50)
			if r.Error != "" {
				msg = errorSummary(r.Error, 100)
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s", age(c.Metadata.CreatedAt, d.now), shortSHA(c.Spec.SHA, c.Metadata.Name), orNone(string(r.Phase)), r.Plan.Text(), orNone(msg)))
		}
		if len(rows) == describeEvents {
			break
		}
	}
	if len(rows) == 0 {
		d.kv(0, "Events", "")
		return
	}
	d.line(0, "Events:")
	d.line(1, "AGE\tCOMMIT\tRESULT\tPLAN\tMESSAGE")
	for _, r := range rows {
		d.line(1, "%s", r)
	}
}

func (d *describer) nodeGroup(ctx context.Context, tenant, name string) (string, error) {
	g, err := d.c.NodeGroup(ctx, tenant, name)
	if err != nil {
		return "", err
	}
	machines, err := d.c.Machines(ctx, tenant, client.ListOptions{})
	if err != nil {
		return "", err
	}
	commits, err := d.c.Commits(ctx, client.ListOptions{Limit: describeCommits})
	if err != nil {
		return "", err
	}
	d.start()
	d.kv(0, "Name", g.Metadata.Name)
	d.kv(0, "Tenant", g.Tenant())
	d.kv(0, "Role", g.Role())
	d.meta(g.Metadata)
	d.line(0, "Spec:")
	d.kv(1, "Count", strconv.Itoa(g.Spec.Count))
	d.kv(1, "Provider Class", g.Spec.ProviderClass)
	d.kv(1, "Provider Config", providerConfig(g.Spec.ProviderConfig))
	d.kv(1, "Talos Version", g.Spec.TalosVersion)
	d.kv(1, "Config Patches", patchNames(g.Spec.ConfigPatches))
	d.line(0, "Status:")
	d.kv(1, "Machines", counts(g.Status.Machines))
	d.kv(1, "Message", g.Status.Message)
	d.conditions(g.Status.Conditions)
	var rows []string
	for _, m := range machines {
		if m.Spec.NodeGroup == name {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s", m.Metadata.Name, orNone(string(m.Status.Stage)), orNone(m.Spec.ManagementAddress), orNone(m.Spec.Hostname), age(m.Metadata.CreatedAt, d.now)))
		}
	}
	if len(rows) == 0 {
		d.kv(0, "Machines", "")
	} else {
		d.line(0, "Machines:")
		d.line(1, "NAME\tSTAGE\tADDRESS\tHOSTNAME\tAGE")
		for _, r := range rows {
			d.line(1, "%s", r)
		}
	}
	d.lastResult(tenant, commits)
	d.events(tenant, commits)
	return d.done(), nil
}

// providerConfig writes a provider config's top-level settings as k=v.
func providerConfig(m map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func (d *describer) patch(ctx context.Context, tenant, name string) (string, error) {
	p, err := d.c.ConfigPatch(ctx, tenant, name)
	if err != nil {
		return "", err
	}
	d.start()
	d.kv(0, "Name", p.Metadata.Name)
	d.kv(0, "Tenant", p.Tenant())
	d.meta(p.Metadata)
	d.line(0, "Spec:")
	target := p.Spec.TargetRole
	if target == "" {
		target = "all machines"
	}
	d.kv(1, "Target Role", target)
	d.text(1, "Patch", p.Spec.Patch)
	d.line(0, "Status:")
	d.kv(1, "Machines", strconv.Itoa(p.Status.Machines))
	return d.done(), nil
}

func (d *describer) machine(ctx context.Context, tenant, id string) (string, error) {
	m, err := d.c.Machine(ctx, tenant, id)
	if err != nil {
		return "", err
	}
	d.start()
	d.kv(0, "Name", m.Metadata.Name)
	d.kv(0, "Tenant", m.Spec.Tenant)
	d.kv(0, "Node Group", m.Spec.NodeGroup)
	d.kv(0, "Role", m.Spec.Role)
	d.meta(m.Metadata)
	d.line(0, "Spec:")
	d.kv(1, "Provider Class", m.Spec.ProviderClass)
	d.kv(1, "Provider ID", m.Spec.ProviderID)
	d.kv(1, "Shape", m.Spec.Shape)
	d.kv(1, "Hostname", m.Spec.Hostname)
	d.kv(1, "Management Address", m.Spec.ManagementAddress)
	d.kv(1, "TF Address", m.Spec.TFAddress)
	st := m.Status
	d.line(0, "Status:")
	d.kv(1, "Stage", string(st.Stage))
	d.kv(1, "Ready", strconv.FormatBool(st.Ready))
	d.kv(1, "Talos Version", st.TalosVersion)
	d.kv(1, "Kubernetes Version", st.KubernetesVersion)
	d.kv(1, "Addresses", strings.Join(st.Addresses, ","))
	d.kv(1, "Last Seen", d.when(st.LastSeen))
	d.kv(1, "Message", st.Message)
	d.kv(1, "Maintenance", strconv.FormatBool(st.Maintenance))
	d.hardware(1, st.Hardware)
	d.network(1, st.Network)
	d.schematic(1, st.Schematic)
	return d.done(), nil
}

// hardware writes a machine's hardware: its processors, memory, system
// and disks, the system disk marked.
func (d *describer) hardware(level int, h *schema.MachineHardware) {
	if h == nil {
		d.kv(level, "Hardware", "")
		return
	}
	d.line(level, "Hardware:")
	d.kv(level+1, "Arch", h.Arch)
	d.kv(level+1, "CPUs", strconv.Itoa(h.CPUs))
	for _, p := range h.Processors {
		d.kv(level+2, "Processor", fmt.Sprintf("%s, %d cores, %d threads, %d MHz", strings.TrimSpace(p.Manufacturer+" "+p.ProductName), p.CoreCount, p.ThreadCount, p.MaxSpeedMHz))
	}
	d.kv(level+1, "Memory", humanize.IBytes(uint64(h.MemoryMiB)<<20))
	for _, m := range h.MemoryModules {
		d.kv(level+2, "Module", strings.TrimSpace(humanize.IBytes(uint64(m.SizeMiB)<<20)+" "+m.Manufacturer+" "+m.Description))
	}
	if sys := h.System; sys != nil {
		d.kv(level+1, "System", strings.TrimSpace(sys.Manufacturer+" "+sys.ProductName+" "+sys.Version))
		d.kv(level+2, "Serial", sys.SerialNumber)
		d.kv(level+2, "UUID", sys.UUID)
	}
	if len(h.BlockDevices) == 0 {
		d.kv(level+1, "Disks", "")
		return
	}
	d.line(level+1, "Disks:")
	d.line(level+2, "NAME\tSIZE\tMODEL\tTRANSPORT\tSYSTEM")
	for _, b := range h.BlockDevices {
		system := ""
		if b.SystemDisk {
			system = "yes"
		}
		transport := b.Transport
		if b.Rotational {
			transport += ",rotational"
		}
		d.line(level+2, "%s\t%s\t%s\t%s\t%s", b.Name, humanize.IBytes(b.SizeBytes), orNone(b.Model), orNone(transport), orNone(system))
	}
}

// network writes a machine's host name, addresses, gateways and links.
func (d *describer) network(level int, n *schema.MachineNetwork) {
	if n == nil {
		d.kv(level, "Network", "")
		return
	}
	d.line(level, "Network:")
	host := n.Hostname
	if n.Domainname != "" {
		host += "." + n.Domainname
	}
	d.kv(level+1, "Hostname", host)
	d.kv(level+1, "Addresses", strings.Join(n.Addresses, ","))
	d.kv(level+1, "Default Gateways", strings.Join(n.DefaultGateways, ","))
	for _, l := range n.Links {
		state := l.OperationalState
		if state == "" {
			state = map[bool]string{true: "up", false: "down"}[l.Up]
		}
		speed := ""
		if l.SpeedMbps > 0 {
			speed = strconv.Itoa(l.SpeedMbps) + " Mb/s"
		}
		d.kv(level+1, "Link "+l.Name, strings.Join(slices.DeleteFunc([]string{state, l.HardwareAddress, speed}, func(s string) bool { return s == "" }), ", "))
	}
}

// schematic writes a machine's image schematic and its extensions.
func (d *describer) schematic(level int, s *schema.MachineSchematic) {
	if s == nil {
		d.kv(level, "Schematic", "")
		return
	}
	d.line(level, "Schematic:")
	d.kv(level+1, "ID", s.ID)
	var ext []string
	for _, e := range s.Extensions {
		ext = append(ext, strings.TrimSpace(e.Name+" "+e.Version))
	}
	d.kv(level+1, "Extensions", strings.Join(ext, ", "))
}

// planeText says what the Talos plane did in a run; "" for nothing.
func planeText(a *schema.PlaneActions) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// outputTailLines is how much of a failed tenant's tofu output describe
// commit shows.
const outputTailLines = 20

func (d *describer) commit(ctx context.Context, rev string) (string, error) {
	c, err := d.c.Commit(ctx, rev)
	if err != nil {
		return "", err
	}
	d.start()
	d.kv(0, "Name", c.Metadata.Name)
	d.kv(0, "SHA", c.Spec.SHA)
	d.kv(0, "Ref", c.Spec.Ref)
	d.kv(0, "Author", c.Spec.Author)
	d.kv(0, "Preview", strconv.FormatBool(c.Spec.Preview))
	d.text(0, "Message", c.Spec.Message)
	d.kv(0, "Created", d.when(c.Metadata.CreatedAt))
	st := c.Status
	d.line(0, "Status:")
	d.kv(1, "Phase", string(st.Phase))
	d.text(1, "Message", st.Message)
	d.kv(1, "Non-Fast-Forward", strconv.FormatBool(st.NonFastForward))
	if a := st.Ancestry; a != nil {
		d.kv(1, "Last Applied", a.LastApplied)
		d.text(1, "Ancestry", a.Message)
	}
	tm := st.Timings
	d.kv(1, "Received", d.when(tm.ReceivedAt))
	d.kv(1, "Validated", d.when(tm.ValidatedAt))
	d.kv(1, "Planned", d.when(tm.PlannedAt))
	d.kv(1, "Finished", d.when(tm.FinishedAt))
	d.conditions(st.Conditions)
	if len(st.Tenants) == 0 {
		d.kv(0, "Tenants", "")
	} else {
		d.line(0, "Tenants:")
		d.line(1, "TENANT\tPHASE\tPLAN\tTALOS PLANE\tDURATION\tERROR")
		for _, r := range st.Tenants {
			dur := ""
			if !r.StartedAt.IsZero() && !r.FinishedAt.IsZero() {
				dur = r.FinishedAt.Sub(r.StartedAt).Round(100 * time.Millisecond).String()
			}
			d.line(1, "%s\t%s\t%s\t%s\t%s\t%s", r.Tenant, orNone(string(r.Phase)), r.Plan.Text(), orNone(planeText(r.Plane)), orNone(dur), orNone(errorSummary(r.Error, 100)))
		}
		d.retries(st.Tenants)
	}
	if len(st.Problems) > 0 {
		d.line(0, "Problems:")
		for _, p := range st.Problems {
			d.line(1, "%s", p.String())
		}
	}
	for _, r := range st.Tenants {
		if r.Phase != schema.CommitFailed {
			continue
		}
		if r.Error != "" && strings.Contains(r.Error, "\n") {
			d.text(0, "Error of "+r.Tenant, r.Error)
		}
		if tail := lastLines(r.OutputTail, outputTailLines); tail != "" {
			d.line(0, "Output of %s (last %d lines):", r.Tenant, outputTailLines)
			for _, l := range strings.Split(tail, "\n") {
				d.line(1, "%s", strings.ReplaceAll(l, "\t", "    "))
			}
		}
	}
	return d.done(), nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}
