package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

type getOptions struct {
	output      string
	selector    string
	tenant      string
	watch       bool
	watchOnly   bool
	watchEvents bool
	noHeaders   bool
}

const getLong = `Get lists resources of one type, or gets the ones NAMEd, and prints them as a
table (default), a wide table, JSON, YAML or kind/NAME lines.

Types and their aliases:
  tenants     (tenant, tn)
  nodegroups  (nodegroup, ng)             live in a tenant
  machines    (machine, m)
  patches     (patch, cp, configpatches)  live in a tenant
  providers   (provider)
  commits     (commit)                    newest first; a NAME is a revision or a prefix of 7+ characters
  backups     (backup)                    of one tenant (--tenant/-t), oldest first; a NAME is a backup ID
  history                                 get history TENANT [MACHINE]: a tenant's events (its machines'
                                          transitions, availability, rollouts, reboots, restores) or one
                                          machine's transitions and gauges, over --since/--until (24h)
  tokens      (token)                     the server's API tokens (admin): owner, role, source, expiry
                                          and last use, never a secret

Node groups and config patches live in a tenant: --tenant/-t T scopes them,
and NAME may be written TENANT/NAME. Without --tenant, get lists them in
every tenant. --tenant also scopes machines, and commits to those that ran
the tenant.

-o json prints one object as the server serves it, and several as
{"items":[…],"total":N}, like the API's lists. An empty table prints "No
resources found." on stderr. A NAME that does not exist prints an error and
makes get exit 1; the others are printed.

--watch (-w) prints the current objects, then a row for every change until
interrupted; it resumes by itself after a dropped connection.`

func newGetCmd() *cobra.Command {
	var o getOptions
	var h historyOptions
	cmd := &cobra.Command{
		Use:   "get TYPE [NAME...]",
		Short: "Print tenants, node groups, machines, patches, providers, commits, API tokens, or a tenant's backups or history",
		Long:  getLong,
		Example: `  rezusctl get tenants
  rezusctl get ng -t production
  rezusctl get machines -l rezuscloud.io/role=worker -o wide
  rezusctl get nodegroup production/workers -o yaml
  rezusctl get commits
  rezusctl get backups -t production
  rezusctl get history production --since 6h
  rezusctl get history production sim-25b33181a5738e00 -o wide
  rezusctl get tokens
  rezusctl get machines -w`,
		ValidArgsFunction: completeTypeAndNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &exitError{code: exitUsage, msg: "give a resource type: " + typeNames()}
			}
			if err := checkOutput(o.output, outTable, outWide, outJSON, outYAML, outName); err != nil {
				return err
			}
			if slices.Contains(historyWords, strings.ToLower(args[0])) {
				c, err := newClient(cmd)
				if err != nil {
					return err
				}
				return runGetHistory(cmd.Context(), c, cmd.OutOrStdout(), args[1:], &o, h, time.Now())
			}
			if h != (historyOptions{}) {
				return &exitError{code: exitUsage, msg: "--since, --until and --step apply to a history only: rezusctl get history TENANT [MACHINE]"}
			}
			if slices.Contains(backupWords, strings.ToLower(args[0])) {
				c, err := newClient(cmd)
				if err != nil {
					return err
				}
				return runGetBackups(cmd.Context(), c, cmd.OutOrStdout(), cmd.ErrOrStderr(), args[1:], &o)
			}
			if slices.Contains(tokenWords, strings.ToLower(args[0])) {
				c, err := newClient(cmd)
				if err != nil {
					return err
				}
				return runGetTokens(cmd.Context(), c, cmd.OutOrStdout(), cmd.ErrOrStderr(), args[1:], &o, time.Now())
			}
			if err := checkSelector(o.selector); err != nil {
				return err
			}
			rt, err := lookupType(args[0])
			if err != nil {
				return err
			}
			if o.tenant != "" && (rt.kind == schema.KindTenant || rt.kind == schema.KindProvider) {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--tenant does not apply to %s", rt.name)}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if o.watch || o.watchOnly {
				return watchGet(cmd.Context(), c, cmd.OutOrStdout(), cmd.ErrOrStderr(), rt, args[1:], &o)
			}
			return runGet(cmd.Context(), c, cmd.OutOrStdout(), cmd.ErrOrStderr(), rt, args[1:], &o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", outTable, "output format: table, wide, json, yaml or name")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. rezuscloud.io/role=worker,environment!=test")
	f.StringVarP(&o.tenant, "tenant", "t", "", "the tenant whose node groups, patches, machines, commits or backups to get")
	f.BoolVarP(&o.watch, "watch", "w", false, "after printing, watch for changes and print them")
	f.BoolVar(&o.watchOnly, "watch-only", false, "watch for changes without printing the current objects first")
	f.BoolVar(&o.watchEvents, "output-watch-events", false, "with --watch, print the event type (ADDED, MODIFIED, DELETED) of each change")
	f.BoolVar(&o.noHeaders, "no-headers", false, "print tables without their header line")
	f.StringVar(&h.since, "since", "", "a history from this time on: RFC 3339, or a duration before now such as 24h (the server's default: 24h)")
	f.StringVar(&h.until, "until", "", "a history up to this time: RFC 3339, or a duration before now (default: now)")
	f.DurationVar(&h.step, "step", 0, "a machine's history: resample its samples to this step, such as 1h (default: as stored)")
	registerCompletions(cmd)
	return cmd
}

// target is one object a NAME names.
type target struct {
	tenant, name string
}

// parseNames turns NAME arguments into targets: TENANT/NAME for scoped
// kinds, or NAME with --tenant.
func parseNames(rt *resourceType, tenant string, names []string) ([]target, error) {
	var out []target
	for _, n := range names {
		t := target{tenant: tenant, name: n}
		if rt.scoped {
			if before, after, ok := strings.Cut(n, "/"); ok {
				if tenant != "" && tenant != before {
					return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%s names tenant %q but --tenant is %q", n, before, tenant)}
				}
				t = target{tenant: before, name: after}
			}
			if t.tenant == "" || t.name == "" {
				return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%s live in a tenant: give --tenant/-t TENANT, or write TENANT/%s", rt.name, n)}
			}
		}
		if rt.kind == schema.KindCommit {
			t.tenant = ""
		}
		if t.name == "" {
			return nil, &exitError{code: exitUsage, msg: "a NAME is empty"}
		}
		out = append(out, t)
	}
	return out, nil
}

func runGet(ctx context.Context, c *client.Client, stdout, stderr io.Writer, rt *resourceType, names []string, o *getOptions) error {
	if len(names) == 0 {
		items, err := listObjects(ctx, c, rt, o.tenant, o.selector)
		if err != nil {
			return apiError(err)
		}
		if len(items) == 0 && o.output != outJSON && o.output != outYAML {
			where := ""
			if o.tenant != "" {
				where = fmt.Sprintf(" in tenant %s", o.tenant)
			}
			fmt.Fprintf(stderr, "No resources found%s.\n", where)
			return nil
		}
		return usageError(printObjects(stdout, rt, items, o.output, false, o.noHeaders, time.Now()))
	}
	targets, err := parseNames(rt, o.tenant, names)
	if err != nil {
		return err
	}
	var items []json.RawMessage
	missing := 0
	for _, t := range targets {
		var raw json.RawMessage
		err := c.Get(ctx, rt.getPath(t.tenant, t.name), &raw)
		switch {
		case client.IsNotFound(err):
			missing++
			fmt.Fprintf(stderr, "error: %s\n", notFoundMessage(err))
			continue
		case err != nil:
			return apiError(err)
		}
		items = append(items, raw)
	}
	if len(items) > 0 {
		if err := printObjects(stdout, rt, items, o.output, len(targets) == 1, o.noHeaders, time.Now()); err != nil {
			return usageError(err)
		}
	}
	if missing > 0 {
		return &exitError{code: exitFailed}
	}
	return nil
}

// listObjects lists the objects of a type: those of one tenant, or all.
// Scoped kinds without a tenant take one list of tenants and one list per
// tenant.
func listObjects(ctx context.Context, c *client.Client, rt *resourceType, tenant, selector string) ([]json.RawMessage, error) {
	opts := client.ListOptions{LabelSelector: selector}
	if !rt.scoped {
		path := rt.listPath(tenant)
		if rt.kind == schema.KindCommit {
			path = rt.listPath("")
		}
		l, err := c.List(ctx, path, opts)
		if err != nil {
			return nil, err
		}
		if rt.kind == schema.KindCommit && tenant != "" {
			return commitsOfTenant(l.Items, tenant), nil
		}
		return l.Items, nil
	}
	tenants := []string{tenant}
	if tenant == "" {
		ts, err := c.List(ctx, client.TenantsPath, client.ListOptions{})
		if err != nil {
			return nil, err
		}
		tenants = tenants[:0]
		for _, raw := range ts.Items {
			h, err := decodeHeader(raw)
			if err != nil {
				return nil, fmt.Errorf("decode tenant: %w", err)
			}
			tenants = append(tenants, h.Metadata.Name)
		}
	}
	var items []json.RawMessage
	for _, t := range tenants {
		path := client.NodeGroupsPath(t)
		if rt.kind == schema.KindConfigPatch {
			path = client.PatchesPath(t)
		}
		l, err := c.List(ctx, path, opts)
		if err != nil {
			if tenant == "" && client.IsNotFound(err) {
				continue // the tenant went away between the two lists
			}
			return nil, err
		}
		items = append(items, l.Items...)
	}
	return items, nil
}

// commitsOfTenant keeps the commits with a result for tenant.
func commitsOfTenant(items []json.RawMessage, tenant string) []json.RawMessage {
	var out []json.RawMessage
	for _, raw := range items {
		if c, err := decodeAs[schema.Commit](raw); err == nil && commitTouches(c, tenant) {
			out = append(out, raw)
		}
	}
	return out
}

func commitTouches(c *schema.Commit, tenant string) bool {
	return slices.ContainsFunc(c.Status.Tenants, func(r schema.TenantResult) bool { return r.Tenant == tenant })
}

// sortForDisplay orders objects as a list of their type is ordered:
// commits newest first, the others by tenant and name.
func sortForDisplay[T any](rt *resourceType, items []T, raw func(T) json.RawMessage) {
	type keyed struct {
		key     string
		created time.Time
		v       T
	}
	ks := make([]keyed, len(items))
	for i, it := range items {
		h, _ := decodeHeader(raw(it))
		ks[i] = keyed{key: h.Metadata.Name, created: h.Metadata.CreatedAt, v: it}
		if rt.scoped {
			ks[i].key = h.tenantOf() + "\x00" + h.Metadata.Name
		}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		if rt.kind == schema.KindCommit {
			return b.created.Compare(a.created)
		}
		return strings.Compare(a.key, b.key)
	})
	for i := range ks {
		items[i] = ks[i].v
	}
}

// watchGet prints the current objects and then every change, until ctx
// ends.
func watchGet(ctx context.Context, c *client.Client, stdout, stderr io.Writer, rt *resourceType, names []string, o *getOptions) error {
	if rt.scoped && o.tenant == "" {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("watching %s needs --tenant/-t: they live in a tenant", rt.name)}
	}
	targets, err := parseNames(rt, o.tenant, names)
	if err != nil {
		return err
	}
	var path string
	switch {
	case rt.scoped:
		path = client.NodeGroupsPath(o.tenant)
		if rt.kind == schema.KindConfigPatch {
			path = client.PatchesPath(o.tenant)
		}
	case rt.kind == schema.KindCommit:
		path = client.CommitsPath
	default:
		path = rt.listPath(o.tenant)
	}
	match := func(ev client.Event, raw json.RawMessage) bool {
		if rt.kind == schema.KindCommit && o.tenant != "" {
			if c, err := decodeAs[schema.Commit](raw); err != nil || !commitTouches(c, o.tenant) {
				return false
			}
		}
		if len(targets) == 0 {
			return true
		}
		for _, t := range targets {
			if ev.Meta.Metadata.Name == t.name || (rt.kind == schema.KindCommit && commitMatches(raw, t.name)) {
				return true
			}
		}
		return false
	}
	w, err := c.Watch(ctx, path, client.WatchOptions{LabelSelector: o.selector, OnReconnect: reconnectNote(stderr)})
	if err != nil {
		return apiError(err)
	}
	defer w.Close()

	p := &watchTable{rt: rt, o: o, out: stdout, rows: &rowWriter{w: stdout}}
	inInitial := true
	var current []client.Event
	for {
		ev, err := w.Next()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return apiError(err)
		}
		if ev.Type == client.Bookmark {
			if ev.InitialEnd() && inInitial {
				inInitial = false
				if err := p.initial(current); err != nil {
					return err
				}
				current = nil
			}
			continue
		}
		if !match(ev, ev.Object) {
			continue
		}
		if inInitial {
			// The current state, which --watch-only leaves out.
			if !o.watchOnly {
				current = append(current, ev)
			}
			continue
		}
		if err := p.event(ev); err != nil {
			return err
		}
	}
}

// commitMatches reports whether a commit is the one a revision or prefix
// names.
func commitMatches(raw json.RawMessage, name string) bool {
	c, err := decodeAs[schema.Commit](raw)
	if err != nil {
		return false
	}
	key := schema.CommitName(name)
	return strings.HasPrefix(c.Metadata.Name, key) || strings.HasPrefix(c.Metadata.Name, "sha256-"+key) || strings.HasPrefix(c.Spec.SHA, name)
}

// reconnectNote tells the user on stderr that a watch reconnects.
func reconnectNote(stderr io.Writer) func(error, time.Duration) {
	return func(reason error, delay time.Duration) {
		if client.Code(reason) == 410 {
			fmt.Fprintf(stderr, "watch: %v; starting over from the current state\n", reason)
			return
		}
		fmt.Fprintf(stderr, "watch: %v; reconnecting in %s\n", reason, delay.Round(time.Millisecond))
	}
}

// watchTable prints the objects of get --watch.
type watchTable struct {
	rt   *resourceType
	o    *getOptions
	out  io.Writer
	rows *rowWriter
}

func (p *watchTable) columns() []string {
	cols := p.rt.columns(p.o.output == outWide)
	if p.o.watchEvents {
		cols = append([]string{"EVENT"}, cols...)
	}
	return cols
}

func (p *watchTable) row(ev client.Event) ([]string, error) {
	r, err := p.rt.row(ev.Object, p.o.output == outWide, time.Now())
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", p.rt.singular(), err)
	}
	if p.o.watchEvents {
		r = append([]string{ev.Type}, r...)
	}
	return r, nil
}

// initial prints the current state, which the watch sent before its first
// BOOKMARK, as one table.
func (p *watchTable) initial(evs []client.Event) error {
	sortForDisplay(p.rt, evs, func(ev client.Event) json.RawMessage { return ev.Object })
	switch p.o.output {
	case outTable, outWide:
		var rows [][]string
		for _, ev := range evs {
			r, err := p.row(ev)
			if err != nil {
				return usageError(err)
			}
			rows = append(rows, r)
		}
		header := p.columns()
		p.rows.setWidths(append([][]string{header}, rows...)...)
		if !p.o.noHeaders {
			if err := p.rows.write(header); err != nil {
				return usageError(err)
			}
		}
		for _, r := range rows {
			if err := p.rows.write(r); err != nil {
				return usageError(err)
			}
		}
		return nil
	}
	for _, ev := range evs {
		if err := p.event(ev); err != nil {
			return err
		}
	}
	return nil
}

// event prints one change.
func (p *watchTable) event(ev client.Event) error {
	var err error
	switch p.o.output {
	case outTable, outWide:
		var r []string
		if r, err = p.row(ev); err == nil {
			err = p.rows.write(r)
		}
	case outName:
		name := p.rt.displayName(ev.Object)
		if p.o.watchEvents {
			name = ev.Type + " " + name
		}
		_, err = fmt.Fprintln(p.out, name)
	case outJSON:
		doc := []byte(ev.Object)
		if p.o.watchEvents {
			doc = ev.Line
		}
		err = printJSON(p.out, doc)
	case outYAML:
		doc := []byte(ev.Object)
		if p.o.watchEvents {
			doc = ev.Line
		}
		if _, err = io.WriteString(p.out, "---\n"); err == nil {
			err = printYAML(p.out, doc)
		}
	}
	if err != nil {
		return usageError(err)
	}
	return nil
}
