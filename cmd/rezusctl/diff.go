package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sergi/go-diff/diffmatchpatch"
	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

type diffFlags struct {
	rev, repo, output, color string
	rendered, plan, loopback bool
}

func newDiffCmd() *cobra.Command {
	var f diffFlags
	cmd := &cobra.Command{
		Use:   "diff [PATH]",
		Short: "Show what local manifests, or a commit, would change on the server",
		Long: `Diff validates the manifests under PATH (default ".") with the same checks the
server runs, then compares them with what the server has applied and prints,
per tenant, the objects created, changed or deleted with their changed fields,
the machines that would appear or go, and a summary.

--rendered also compares the rendered OpenTofu workspaces (secrets redacted).
--plan asks the server for a real tofu plan of the manifests (role edit): it
plans against each tenant's current state without a lock and never applies.
--rev reads the manifests from a git commit instead of the working tree.

SOPS-encrypted files are decrypted with the user's age key, as validate does
(SOPS_AGE_KEY_FILE), and checked without their encrypted values when there is
none. A decrypted value never shows: it reads <encrypted>, and since the server
never tells an applied one either, a change inside an encrypted value shows in
--plan only. --rendered skips a tenant with encrypted values when there is no
key.

Exit codes, as flux diff: 0 no differences, 1 differences, 2 an error
(invalid manifests included). That makes it a CI gate.`,
		Example: `  rezusctl diff clusters
  rezusctl diff --plan clusters
  rezusctl diff --rev origin/feature --rendered clusters`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return runDiff(cmd, dir, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.rev, "rev", "", "diff the tree of this git revision instead of the working tree")
	fl.StringVar(&f.repo, "repo", ".", "the git repository that --rev reads from")
	fl.BoolVar(&f.rendered, "rendered", false, "also diff the rendered main.tf.json of every changed tenant (secrets redacted)")
	fl.BoolVar(&f.plan, "plan", false, "ask the server for a real tofu plan of the manifests (needs role edit)")
	fl.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	fl.StringVar(&f.color, "color", "auto", "color the diff: auto, always or never (NO_COLOR also turns it off)")
	addLoopbackFlag(fl, &f.loopback)
	return cmd
}

// tenantDiff is one tenant's part of a diff.
type tenantDiff struct {
	Tenant    string                   `json:"tenant"`
	Changes   []modeldiff.ObjectChange `json:"changes"`
	Plan      *schema.PlanSummary      `json:"plan,omitempty"`
	Resources []preview.ResourceChange `json:"resources,omitempty"`
	Rendered  string                   `json:"rendered,omitempty"`
	Error     string                   `json:"error,omitempty"`
}

func (t *tenantDiff) differs() bool {
	return len(t.Changes) > 0 || (t.Plan != nil && !(t.Plan.Add == 0 && t.Plan.Change == 0 && t.Plan.Destroy == 0)) || t.Rendered != ""
}

type diffResult struct {
	Differences bool         `json:"differences"`
	Revision    string       `json:"revision,omitempty"`
	Tenants     []tenantDiff `json:"tenants"`
}

// runDiff compares the manifests in dir with what the server has applied:
// it checks the manifests, diffs the models of every tenant on either side,
// adds the rendered diffs and the server's plans when asked, and prints the
// result. The exit code says whether anything differs.
func runDiff(cmd *cobra.Command, dir string, f *diffFlags) error {
	if f.output != "text" && f.output != "json" {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown output format %q: use text or json", f.output)}
	}
	tree, local, err := checkedTree(cmd, dir, f)
	if err != nil {
		return err
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	applied, err := appliedTenants(ctx, c)
	if err != nil {
		return err
	}
	res := &diffResult{Revision: tree.revision}
	if res.Tenants, err = modelDiffs(ctx, c, local, applied); err != nil {
		return err
	}
	for i := range res.Tenants {
		res.Tenants[i].Changes = tree.values.mask(res.Tenants[i].Changes, local[res.Tenants[i].Tenant])
	}
	if f.rendered {
		if err := addRenderedDiffs(cmd, c, res, local, tree); err != nil {
			return err
		}
	}
	if f.plan {
		if err := addPlans(cmd, c, tree, res); err != nil {
			return err
		}
	}
	return writeDiff(cmd, f, res)
}

// checkedTree reads and checks the manifests of dir, printing their
// problems, and returns their tenants by name.
func checkedTree(cmd *cobra.Command, dir string, f *diffFlags) (*tree, map[string]*schema.TenantDesired, error) {
	opts, err := moduleOptions(cmd, f.loopback)
	if err != nil {
		return nil, nil, err
	}
	tree, err := readTree(dir, f.rev, f.repo, opts)
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, msg: err.Error()}
	}
	desired, probs, err := tree.check()
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, msg: err.Error()}
	}
	noteUndecrypted(cmd.ErrOrStderr(), tree.undecrypted)
	if len(probs) > 0 {
		for _, p := range probs {
			p.File = tree.display(p.File)
			fmt.Fprintln(cmd.OutOrStdout(), p.String())
		}
		return nil, nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%d problems in the manifests: fix them before diffing", len(probs))}
	}
	local := map[string]*schema.TenantDesired{}
	for _, td := range desired.Tenants {
		local[td.Tenant.Metadata.Name] = td
	}
	return tree, local, nil
}

// appliedTenants returns the server's tenants by name.
func appliedTenants(ctx context.Context, c *client.Client) (map[string]*schema.Tenant, error) {
	l, err := c.List(ctx, client.TenantsPath, client.ListOptions{})
	if err != nil {
		return nil, apiError(err)
	}
	applied := map[string]*schema.Tenant{}
	for _, raw := range l.Items {
		t := new(schema.Tenant)
		if err := json.Unmarshal(raw, t); err != nil {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("decode tenant: %v", err)}
		}
		applied[t.Metadata.Name] = t
	}
	return applied, nil
}

// modelDiffs diffs the applied and the local model of every tenant on
// either side, in the order of their names.
func modelDiffs(ctx context.Context, c *client.Client, local map[string]*schema.TenantDesired, applied map[string]*schema.Tenant) ([]tenantDiff, error) {
	names := map[string]bool{}
	for n := range applied {
		names[n] = true
	}
	for n := range local {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var out []tenantDiff
	for _, name := range sorted {
		before := modeldiff.Model{}
		if t := applied[name]; t != nil {
			m, err := appliedModel(ctx, c, t)
			if err != nil {
				return nil, apiError(err)
			}
			before = m
		}
		after := modeldiff.Model{}
		if td := local[name]; td != nil {
			after = modeldiff.DesiredModel(td)
		}
		td := tenantDiff{Tenant: name, Changes: modeldiff.Diff(before, after)}
		if td.Changes == nil {
			td.Changes = []modeldiff.ObjectChange{}
		}
		out = append(out, td)
	}
	return out, nil
}

// addRenderedDiffs adds the rendered diff of each tenant that changes,
// without its decrypted values; a tenant with values that were not
// decrypted is left out, and said so on stderr.
func addRenderedDiffs(cmd *cobra.Command, c *client.Client, res *diffResult, local map[string]*schema.TenantDesired, tree *tree) error {
	for i := range res.Tenants {
		t := &res.Tenants[i]
		if len(t.Changes) == 0 {
			continue
		}
		if tree.decrypt == nil && hasEncrypted(local[t.Tenant]) {
			fmt.Fprintf(cmd.ErrOrStderr(), "tenant %s: no rendered diff: it has encrypted values and there is no age key (%s)\n", t.Tenant, sopsfile.EnvKeyFile)
			continue
		}
		var err error
		if t.Rendered, err = renderedDiff(cmd.Context(), c, local[t.Tenant], t.Tenant); err != nil {
			return err
		}
		t.Rendered = tree.values.scrub(t.Rendered)
	}
	return nil
}

// hasEncrypted reports whether one of a tenant's objects has encrypted
// values.
func hasEncrypted(td *schema.TenantDesired) bool {
	if td == nil {
		return false
	}
	if len(td.Tenant.Source.Encrypted) > 0 {
		return true
	}
	for _, ng := range td.NodeGroups {
		if len(ng.Source.Encrypted) > 0 {
			return true
		}
	}
	for _, p := range td.Patches {
		if len(p.Source.Encrypted) > 0 {
			return true
		}
	}
	return false
}

// addPlans adds the server's plan of each tenant, printing the problems
// the server finds in the manifests.
func addPlans(cmd *cobra.Command, c *client.Client, tree *tree, res *diffResult) error {
	pr, err := c.Preview(cmd.Context(), preview.Request{Files: tree.manifests(), Root: tree.root, Plan: true})
	if err != nil {
		return apiError(err)
	}
	if !pr.Valid {
		for _, p := range pr.Problems {
			fmt.Fprintln(cmd.OutOrStdout(), p.String())
		}
		return &exitError{code: exitUsage, msg: "the server found problems in the manifests"}
	}
	for _, pt := range pr.Tenants {
		for i := range res.Tenants {
			if res.Tenants[i].Tenant == pt.Tenant {
				res.Tenants[i].Plan, res.Tenants[i].Resources, res.Tenants[i].Error = pt.Plan, pt.Resources, pt.Error
			}
		}
	}
	return nil
}

// writeDiff prints res as text or JSON and returns the exit code it asks
// for: a failed plan, differences, or none.
func writeDiff(cmd *cobra.Command, f *diffFlags, res *diffResult) error {
	failed := false
	for i := range res.Tenants {
		res.Differences = res.Differences || res.Tenants[i].differs()
		failed = failed || res.Tenants[i].Error != ""
	}
	if f.output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return &exitError{code: exitUsage, msg: err.Error()}
		}
	} else {
		printDiff(cmd.OutOrStdout(), res, useColor(f.color, cmd.OutOrStdout()))
	}
	switch {
	case failed:
		return &exitError{code: exitUsage, msg: "the plan failed for some tenants"}
	case res.Differences:
		return &exitError{code: exitFailed}
	}
	return nil
}

// appliedModel fetches a tenant's node groups, patches and machines.
func appliedModel(ctx context.Context, c *client.Client, t *schema.Tenant) (modeldiff.Model, error) {
	name := t.Metadata.Name
	ngs, err := listAs[schema.NodeGroup](ctx, c, client.NodeGroupsPath(name))
	if err != nil {
		return modeldiff.Model{}, err
	}
	patches, err := listAs[schema.ConfigPatch](ctx, c, client.PatchesPath(name))
	if err != nil {
		return modeldiff.Model{}, err
	}
	machines, err := listAs[schema.Machine](ctx, c, client.TenantMachinesPath(name))
	if err != nil {
		return modeldiff.Model{}, err
	}
	return modeldiff.AppliedModel(t, ngs, patches, machines), nil
}

func listAs[T any](ctx context.Context, c *client.Client, p string) ([]*T, error) {
	l, err := c.List(ctx, p, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*T, 0, len(l.Items))
	for _, raw := range l.Items {
		v := new(T)
		if err := json.Unmarshal(raw, v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", p, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// renderedDiff diffs the applied workspace with the local one, both
// redacted. The local render uses a throwaway secrets bundle: secrets are
// redacted on both sides, so they never show as a difference.
func renderedDiff(ctx context.Context, c *client.Client, td *schema.TenantDesired, tenant string) (string, error) {
	var applied []byte
	if err := c.Get(ctx, client.RenderedPath(tenant), (*json.RawMessage)(&applied)); err != nil && !client.IsNotFound(err) {
		return "", apiError(err)
	}
	var proposed []byte
	if td != nil {
		bundle, err := talos.GenerateSecrets(td.Tenant.Spec.TalosVersion, time.Now(), td.Tenant.Spec.ServiceAccountKey)
		if err != nil {
			return "", &exitError{code: exitUsage, msg: err.Error()}
		}
		ws, err := render.Builtin().Render(td, bundle)
		if err != nil {
			return "", &exitError{code: exitUsage, msg: err.Error()}
		}
		if proposed, err = render.Redact(ws.Files[render.MainFile]); err != nil {
			return "", &exitError{code: exitUsage, msg: err.Error()}
		}
	}
	return unifiedDiff("applied/"+tenant+"/main.tf.json", "local/"+tenant+"/main.tf.json", indentJSON(applied), indentJSON(proposed)), nil
}

// indentJSON lays out a JSON document one value per line, so that a line
// diff of two shows what changed; other bytes are returned as they are.
func indentJSON(b []byte) string {
	var v any
	if len(b) == 0 || json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(b)
	}
	return string(out) + "\n"
}

// unifiedDiff returns a unified diff of two texts with three lines of
// context, or "" when they are equal.
func unifiedDiff(nameA, nameB, a, b string) string {
	if a == b {
		return ""
	}
	dmp := diffmatchpatch.New()
	ca, cb, lines := dmp.DiffLinesToChars(a, b)
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(ca, cb, false), lines)
	type line struct {
		op   byte
		text string
	}
	var all []line
	for _, d := range diffs {
		op := byte(' ')
		switch d.Type {
		case diffmatchpatch.DiffInsert:
			op = '+'
		case diffmatchpatch.DiffDelete:
			op = '-'
		}
		for _, l := range strings.SplitAfter(d.Text, "\n") {
			if l != "" {
				all = append(all, line{op, strings.TrimSuffix(l, "\n")})
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	const context = 3
	aLine, bLine := 1, 1
	for i := 0; i < len(all); {
		if all[i].op == ' ' {
			i++
			aLine++
			bLine++
			continue
		}
		start := max(0, i-context)
		as, bs := aLine-(i-start), bLine-(i-start)
		end, last := i, i
		for end < len(all) && end-last <= 2*context {
			if all[end].op != ' ' {
				last = end
			}
			end++
		}
		end = min(len(all), last+context+1)
		var na, nb int
		var hunk strings.Builder
		for _, l := range all[start:end] {
			hunk.WriteByte(l.op)
			hunk.WriteString(l.text)
			hunk.WriteByte('\n')
			if l.op != '+' {
				na++
			}
			if l.op != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n%s", as, na, bs, nb, hunk.String())
		for _, l := range all[i:end] {
			if l.op != '+' {
				aLine++
			}
			if l.op != '-' {
				bLine++
			}
		}
		i = end
	}
	return out.String()
}

// useColor decides whether to color output.
func useColor(mode string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

const (
	colorRed    = "\x1b[31m"
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorBold   = "\x1b[1m"
	colorReset  = "\x1b[0m"
)

func printDiff(w io.Writer, res *diffResult, color bool) {
	paint := func(c, s string) string {
		if !color {
			return s
		}
		return c + s + colorReset
	}
	var create, change, del, mAdd, mDel, changedTenants int
	for _, t := range res.Tenants {
		if !t.differs() && t.Error == "" {
			continue
		}
		changedTenants++
		fmt.Fprintln(w, paint(colorBold, "tenant "+t.Tenant))
		for _, c := range t.Changes {
			label := c.Kind
			if c.Name != "" {
				label += " " + c.Name
			}
			switch c.Action {
			case modeldiff.ActionCreate:
				create++
				if c.Kind == schema.KindMachine {
					mAdd++
				}
				fmt.Fprintln(w, paint(colorGreen, "+ "+label))
			case modeldiff.ActionDelete:
				del++
				if c.Kind == schema.KindMachine {
					mDel++
				}
				fmt.Fprintln(w, paint(colorRed, "- "+label))
			case modeldiff.ActionUpdate:
				change++
				fmt.Fprintln(w, paint(colorYellow, "~ "+label))
				for _, fc := range c.Fields {
					if fc.Old != nil {
						fmt.Fprintln(w, paint(colorRed, fmt.Sprintf("    - %s: %s", fc.Path, compact(fc.Old))))
					}
					if fc.New != nil {
						fmt.Fprintln(w, paint(colorGreen, fmt.Sprintf("    + %s: %s", fc.Path, compact(fc.New))))
					}
				}
			}
		}
		if t.Plan != nil {
			fmt.Fprintf(w, "  plan: would add %d, change %d, destroy %d\n", t.Plan.Add, t.Plan.Change, t.Plan.Destroy)
			for _, rc := range t.Resources {
				fmt.Fprintf(w, "    %s %s\n", strings.Join(rc.Actions, "+"), rc.Address)
			}
		}
		if t.Error != "" {
			fmt.Fprintln(w, paint(colorRed, "  plan failed: "+firstLine(t.Error, 300)))
		}
		if t.Rendered != "" {
			for _, l := range strings.SplitAfter(t.Rendered, "\n") {
				switch {
				case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
					fmt.Fprint(w, paint(colorBold, strings.TrimSuffix(l, "\n"))+"\n")
				case strings.HasPrefix(l, "+"):
					fmt.Fprint(w, paint(colorGreen, strings.TrimSuffix(l, "\n"))+"\n")
				case strings.HasPrefix(l, "-"):
					fmt.Fprint(w, paint(colorRed, strings.TrimSuffix(l, "\n"))+"\n")
				default:
					fmt.Fprint(w, l)
				}
			}
		}
	}
	fmt.Fprintf(w, "%d of %d tenants differ: %d to create, %d to change, %d to delete; machines +%d -%d\n",
		changedTenants, len(res.Tenants), create, change, del, mAdd, mDel)
}

func compact(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // "<encrypted>" reads as it is
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSuffix(b.String(), "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
