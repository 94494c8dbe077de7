package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

type watchOptions struct {
	tenant          string
	selector        string
	output          string
	resourceVersion string
	noInitial       bool
}

const watchLong = `Watch prints a line for every change of the server's resources until it is
interrupted:

  TIME  TYPE  KIND  NAME  key=value...

TYPE is ADDED, MODIFIED or DELETED. The stream starts with the current state
as ADDED lines (--no-initial leaves them out) unless --resource-version
resumes after a resourceVersion seen earlier. A dropped connection is resumed
after the last resourceVersion seen, with a growing delay between attempts; a
note on stderr says so.

Without a type, watch follows tenants, machines and commits; with
--tenant/-t T, the tenant with its node groups, patches and machines, and the
commits that ran it. A type (tenants, nodegroups, machines, patches,
providers, commits) follows that type only; node groups and patches need
--tenant.

-o json passes the server's JSON lines through unchanged, one per line,
BOOKMARK lines included: {"type":"ADDED","object":{…}}.`

func newWatchCmd() *cobra.Command {
	var o watchOptions
	cmd := &cobra.Command{
		Use:   "watch [TYPE]",
		Short: "Print a line for every change of tenants, machines, commits and more",
		Long:  watchLong,
		Example: `  rezusctl watch
  rezusctl watch -t production
  rezusctl watch machines -l rezuscloud.io/role=worker
  rezusctl watch commits -o json`,
		Args: cobra.MaximumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeFor(cmd, nil, "", nil)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output != "text" && o.output != outJSON {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown output format %q: use text or json", o.output)}
			}
			if err := checkSelector(o.selector); err != nil {
				return err
			}
			if o.resourceVersion != "" {
				if _, err := strconv.ParseUint(o.resourceVersion, 10, 64); err != nil {
					return &exitError{code: exitUsage, msg: fmt.Sprintf("--resource-version %q: want a whole number", o.resourceVersion)}
				}
			}
			var rt *resourceType
			if len(args) == 1 {
				var err error
				if rt, err = lookupType(args[0]); err != nil {
					return err
				}
			}
			streams, err := watchStreams(rt, o.tenant)
			if err != nil {
				return err
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			return runWatch(cmd.Context(), c, cmd.OutOrStdout(), cmd.ErrOrStderr(), streams, &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.tenant, "tenant", "t", "", "follow this tenant only")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector the objects must match")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.resourceVersion, "resource-version", "", "resume after this resourceVersion instead of starting with the current state")
	f.BoolVar(&o.noInitial, "no-initial", false, "leave out the current state the stream starts with")
	registerCompletions(cmd)
	return cmd
}

// watchStream is one watch request and the filter its events pass.
type watchStream struct {
	path string
	// commitTenant keeps only commits that ran this tenant.
	commitTenant string
	// name keeps only the object of that name (a tenant's own watch).
	name string
}

// watchStreams says which watches follow what the user asked for.
func watchStreams(rt *resourceType, tenant string) ([]watchStream, error) {
	if rt == nil {
		if tenant != "" {
			return []watchStream{{path: client.TenantEventsPath(tenant)}, {path: client.CommitEventsPath, commitTenant: tenant}}, nil
		}
		return []watchStream{{path: client.TenantsPath}, {path: client.MachineEventsPath}, {path: client.CommitEventsPath}}, nil
	}
	switch rt.kind {
	case schema.KindTenant:
		return []watchStream{{path: client.TenantsPath, name: tenant}}, nil
	case schema.KindNodeGroup, schema.KindConfigPatch:
		if tenant == "" {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("watching %s needs --tenant/-t: they live in a tenant", rt.name)}
		}
		if rt.kind == schema.KindNodeGroup {
			return []watchStream{{path: client.NodeGroupsPath(tenant)}}, nil
		}
		return []watchStream{{path: client.PatchesPath(tenant)}}, nil
	case schema.KindMachine:
		if tenant != "" {
			return []watchStream{{path: client.TenantMachinesPath(tenant)}}, nil
		}
		return []watchStream{{path: client.MachineEventsPath}}, nil
	case schema.KindCommit:
		return []watchStream{{path: client.CommitEventsPath, commitTenant: tenant}}, nil
	}
	if tenant != "" {
		return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("--tenant does not apply to %s", rt.name)}
	}
	return []watchStream{{path: client.ProvidersPath}}, nil
}

// streamEvent is an event, or the error that ended a stream, of one of
// several watches.
type streamEvent struct {
	stream int
	ev     client.Event
	err    error
}

func runWatch(ctx context.Context, c *client.Client, stdout, stderr io.Writer, streams []watchStream, o *watchOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Open every stream first, so that an unreachable server or a refused
	// token is reported before anything is printed.
	watchers := make([]*client.Watcher, len(streams))
	for i, s := range streams {
		w, err := c.Watch(ctx, s.path, client.WatchOptions{
			LabelSelector:   o.selector,
			ResourceVersion: o.resourceVersion,
			OnReconnect:     reconnectNote(stderr),
		})
		if err != nil {
			return apiError(err)
		}
		defer w.Close()
		watchers[i] = w
	}
	events := make(chan streamEvent)
	for i, w := range watchers {
		go func() {
			for {
				ev, err := w.Next()
				select {
				case events <- streamEvent{stream: i, ev: ev, err: err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	initial := make([]bool, len(streams))
	for i := range initial {
		initial[i] = o.resourceVersion == ""
	}
	for {
		var se streamEvent
		select {
		case <-ctx.Done():
			return nil
		case se = <-events:
		}
		if se.err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return apiError(se.err)
		}
		ev, s := se.ev, streams[se.stream]
		if ev.Type == client.Bookmark {
			if ev.InitialEnd() {
				initial[se.stream] = false
			}
			if o.output == outJSON {
				if err := writeLine(stdout, ev.Line); err != nil {
					return err
				}
			}
			continue
		}
		if initial[se.stream] && o.noInitial {
			continue
		}
		if s.name != "" && ev.Meta.Metadata.Name != s.name {
			continue
		}
		if s.commitTenant != "" && ev.Meta.Kind == schema.KindCommit {
			if cm, err := decodeAs[schema.Commit](ev.Object); err != nil || !commitTouches(cm, s.commitTenant) {
				continue
			}
		}
		if o.output == outJSON {
			if err := writeLine(stdout, ev.Line); err != nil {
				return err
			}
			continue
		}
		if err := writeLine(stdout, []byte(eventLine(time.Now(), ev))); err != nil {
			return err
		}
	}
}

func writeLine(w io.Writer, b []byte) error {
	if _, err := w.Write(append(b[:len(b):len(b)], '\n')); err != nil {
		return usageError(err)
	}
	return nil
}

// eventLine formats one event: time, type, kind, name and the fields that
// say most about the object's state. A tenant's and a node group's say
// what holds them back or what they are doing (the STATUS column), so
// that a rollout's steps read apart although the counts stay the same.
func eventLine(now time.Time, ev client.Event) string {
	name, fields := eventFields(ev.Meta.Kind, ev.Object, now)
	if name == "" {
		name = ev.Meta.Metadata.Name
	}
	line := fmt.Sprintf("%s  %-8s  %-11s  %-24s", now.UTC().Format(time.RFC3339), ev.Type, ev.Meta.Kind, name)
	if fields != "" {
		line += "  " + fields
	}
	return strings.TrimRight(line, " ")
}

// eventFields names an object as the watch line shows it and formats its
// key status fields as key=value.
func eventFields(kind string, raw json.RawMessage, now time.Time) (string, string) {
	kv := func(pairs ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(pairs); i += 2 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			v := pairs[i+1]
			if v == "" {
				v = "<none>"
			}
			if strings.ContainsAny(v, " \"=") {
				v = strconv.Quote(v)
			}
			b.WriteString(pairs[i] + "=" + v)
		}
		return b.String()
	}
	switch kind {
	case schema.KindTenant:
		if t, err := decodeAs[schema.Tenant](raw); err == nil {
			m := t.Status.Machines
			fields := kv("phase", string(t.Status.Phase), "machines", fmt.Sprintf("%d/%d", m.Total, m.Desired), "ready", strconv.Itoa(m.Ready),
				"status", tenantStatus(t.Status, now))
			if t.Status.Message != "" {
				fields += " " + kv("message", t.Status.Message)
			}
			return t.Metadata.Name, fields
		}
	case schema.KindNodeGroup:
		if g, err := decodeAs[schema.NodeGroup](raw); err == nil {
			return g.Tenant() + "/" + g.Metadata.Name, kv("role", g.Role(), "count", strconv.Itoa(g.Spec.Count), "machines", strconv.Itoa(g.Status.Machines.Total), "ready", strconv.Itoa(g.Status.Machines.Ready),
				"status", nodeGroupStatus(g.Status.Conditions))
		}
	case schema.KindConfigPatch:
		if p, err := decodeAs[schema.ConfigPatch](raw); err == nil {
			target := p.Spec.TargetRole
			if target == "" {
				target = "all"
			}
			return p.Tenant() + "/" + p.Metadata.Name, kv("target", target, "machines", strconv.Itoa(p.Status.Machines))
		}
	case schema.KindMachine:
		if m, err := decodeAs[schema.Machine](raw); err == nil {
			return m.Metadata.Name, kv("tenant", m.Spec.Tenant, "nodegroup", m.Spec.NodeGroup, "role", m.Spec.Role, "stage", string(m.Status.Stage), "talos", m.Status.TalosVersion, "address", m.Spec.ManagementAddress)
		}
	case schema.KindCommit:
		if c, err := decodeAs[schema.Commit](raw); err == nil {
			return shortSHA(c.Spec.SHA, c.Metadata.Name), kv("phase", string(c.Status.Phase), "tenants", commitTenants(c))
		}
	case schema.KindProvider:
		if p, err := decodeAs[schema.Provider](raw); err == nil {
			return p.Metadata.Name, kv("available", strconv.FormatBool(p.Status.Available))
		}
	}
	return "", ""
}
