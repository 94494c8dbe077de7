package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// statusCommits is how many recent commits status reads to find each
// tenant's latest result.
const statusCommits = 100

// statusProblems is how many of an invalid commit's problems status
// prints; describe commit prints them all.
const statusProblems = 5

// statusReport is what `status -o json` prints.
type statusReport struct {
	Server string          `json:"server"`
	Status json.RawMessage `json:"status"`
	// LastCommit is the newest commit the server received, when it is not
	// the last applied one: invalid, failed, or still being handled.
	LastCommit     *schema.Commit  `json:"lastCommit,omitempty"`
	LastApplied    *schema.Commit  `json:"lastApplied,omitempty"`
	FailingTenants []failingTenant `json:"failingTenants"`
}

// failed reports whether the report shows something to act on: the
// newest commit is invalid or failed, or a tenant fails.
func (rep *statusReport) failed() bool {
	if c := rep.LastCommit; c != nil {
		switch c.Status.Phase {
		case schema.CommitInvalid, schema.CommitFailed, schema.CommitPartiallyFailed:
			return true
		}
	}
	return len(rep.FailingTenants) > 0
}

// failingTenant is a tenant whose latest result failed or whose status
// carries a message.
type failingTenant struct {
	Name    string `json:"name"`
	Phase   string `json:"phase,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

func newStatusCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the server, its replicas, its source, the newest and the last applied commit, and failing tenants",
		Long: `Status shows the server (URL, version, uptime), on a server that runs as
one of several replicas the replicas (each one's shards and tenants, and
which leads), the source it reconciles (repository, ref, revision, last
fetch, last error), the last applied commit, how many resources it holds,
and the tenants that are failing: those whose latest tofu run failed, or
whose status carries a message. When the newest
commit the server received is not the last applied one, status leads with
it: its phase, and for an invalid commit its first problems as file:line
(rezusctl describe commit lists them all).

Status exits 0 when all is well, 1 when the newest commit is invalid or
failed or a tenant is failing (the report is printed all the same; read
lastCommit and failingTenants of -o json to act on them in a script), and 2
when the server cannot be asked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != outJSON {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown output format %q: use text or json", output)}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			rep, st, err := gatherStatus(cmd.Context(), c)
			if err != nil {
				return apiError(err)
			}
			if err := writeStatus(cmd.OutOrStdout(), output, rep, st); err != nil {
				return usageError(err)
			}
			if rep.failed() {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// writeStatus prints the report as text or JSON.
func writeStatus(w io.Writer, output string, rep *statusReport, st *client.Status) error {
	if output != outJSON {
		return printStatus(w, rep, st, time.Now())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	return printJSON(w, b)
}

// gatherStatus reads the server's status, its tenants and recent commits,
// and the newest and the last applied commit when the recent ones do not
// hold them.
func gatherStatus(ctx context.Context, c *client.Client) (*statusReport, *client.Status, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, nil, err
	}
	tenants, err := c.Tenants(ctx, client.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	commits, err := c.Commits(ctx, client.ListOptions{Limit: statusCommits})
	if err != nil {
		return nil, nil, err
	}
	rep := &statusReport{Server: c.Server(), Status: st.Raw, FailingTenants: []failingTenant{}}
	if r := st.Reconciler; r != nil {
		if rep.LastApplied, err = findCommit(ctx, c, commits, r.LastAppliedCommit); err != nil {
			return nil, nil, err
		}
		if r.LastCommit != r.LastAppliedCommit {
			if rep.LastCommit, err = findCommit(ctx, c, commits, r.LastCommit); err != nil {
				return nil, nil, err
			}
		}
	}
	rep.FailingTenants = failingTenants(tenants, commits)
	return rep, st, nil
}

// findCommit returns the Commit of revision sha: from commits, the recent
// ones, or else from the server; nil when sha is "" or the server has no
// record of it.
func findCommit(ctx context.Context, c *client.Client, commits []schema.Commit, sha string) (*schema.Commit, error) {
	if sha == "" {
		return nil, nil
	}
	for i := range commits {
		if commits[i].Spec.SHA == sha {
			return &commits[i], nil
		}
	}
	cm, err := c.Commit(ctx, sha)
	if err != nil && !client.IsNotFound(err) {
		return nil, err
	}
	return cm, nil
}

// failingTenants lists the tenants whose latest result in commits failed,
// or whose status carries a message.
func failingTenants(tenants []schema.Tenant, commits []schema.Commit) []failingTenant {
	out := []failingTenant{}
	for _, t := range tenants {
		f := failingTenant{Name: t.Metadata.Name, Message: t.Status.Message}
		if cm, r := latestResult(t.Metadata.Name, commits); r != nil {
			f.Phase, f.Commit = string(r.Phase), shortSHA(cm.Spec.SHA, cm.Metadata.Name)
			if r.Phase == schema.CommitFailed {
				f.Error = errorSummary(r.Error, 200)
				if f.Error == "" {
					f.Error = "failed"
				}
			}
		}
		if f.Error != "" || f.Message != "" {
			out = append(out, f)
		}
	}
	return out
}

// replicasSummary says in one line how many replicas live, over how many
// shards, which leads, and how many shards nobody holds.
func replicasSummary(r *api.ReplicasStatus) string {
	s := fmt.Sprintf("%d live", len(r.Members))
	if r.Shards > 0 {
		s += fmt.Sprintf(", %d shards", r.Shards)
	}
	s += ", leader " + orNone(r.Leader)
	if r.Unowned > 0 {
		s += fmt.Sprintf(", %d shards unowned", r.Unowned)
	}
	return s
}

// printReplicas prints a row for each replica of a server that runs as
// one of several: its name, whether it leads, its shards and tenants and
// when it joined (formatted by when).
func printReplicas(w io.Writer, r *api.ReplicasStatus, when func(time.Time) string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tLEADER\tSHARDS\tTENANTS\tJOINED\n")
	for _, m := range r.Members {
		name, leader := m.Name, "-"
		if m.Name == r.Self {
			name += " (this server)"
		}
		if m.Leader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", name, leader, m.Shards, m.Tenants, when(m.Since))
	}
	return tw.Flush()
}

// printLastCommit leads the report with the newest commit when it is not
// the last applied one: its phase, what it says of itself, and for an
// invalid commit its first problems as file:line.
func printLastCommit(w io.Writer, c *schema.Commit, lastSeen string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if c == nil {
		if lastSeen != "" {
			fmt.Fprintf(tw, "Last Commit:\t%s (no record of it yet)\n", lastSeen)
		}
		return tw.Flush()
	}
	sha := shortSHA(c.Spec.SHA, c.Metadata.Name)
	fmt.Fprintf(tw, "Last Commit:\t%s %s\n", sha, orNone(string(c.Status.Phase)))
	fmt.Fprintf(tw, "  Message:\t%s\n", orNone(firstLine(c.Spec.Message, 72)))
	fmt.Fprintf(tw, "  Author:\t%s\n", orNone(c.Spec.Author))
	if c.Status.Phase == schema.CommitInvalid {
		fmt.Fprintf(tw, "  Outcome:\tnothing of it was applied; the last applied commit stays in effect\n")
	} else if msg := c.Status.Message; msg != "" {
		fmt.Fprintf(tw, "  Outcome:\t%s\n", firstLine(msg, 160))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ps := c.Status.Problems
	if len(ps) == 0 {
		return nil
	}
	fmt.Fprintf(w, "  Problems (%d):\n", len(ps))
	for _, p := range ps[:min(len(ps), statusProblems)] {
		fmt.Fprintf(w, "    %s\n", firstLine(p.String(), 200))
	}
	if n := len(ps) - statusProblems; n > 0 {
		fmt.Fprintf(w, "    and %d more: rezusctl describe commit %s\n", n, sha)
	}
	return nil
}

func printStatus(w io.Writer, rep *statusReport, st *client.Status, now time.Time) error {
	lastSeen := ""
	if r := st.Reconciler; r != nil && r.LastCommit != r.LastAppliedCommit {
		lastSeen = r.LastCommit
	}
	if err := printLastCommit(w, rep.LastCommit, lastSeen); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	when := func(t time.Time) string {
		if t.IsZero() {
			return "<none>"
		}
		return t.UTC().Format(time.RFC3339) + " (" + humanDuration(now.Sub(t)) + " ago)"
	}
	fmt.Fprintf(tw, "Server:\t%s\n", rep.Server)
	fmt.Fprintf(tw, "Version:\t%s\n", orNone(st.Server.Version))
	fmt.Fprintf(tw, "Uptime:\t%s\n", humanDuration(time.Duration(st.Server.UptimeSeconds)*time.Second))
	if r := st.Replicas; r != nil {
		fmt.Fprintf(tw, "Replicas:\t%s\n", replicasSummary(r))
		tw.Flush()
		if err := printReplicas(w, r, when); err != nil {
			return err
		}
	}
	if s := st.Source; s != nil {
		fmt.Fprintf(tw, "Source:\n")
		fmt.Fprintf(tw, "  Repository:\t%s\n", orNone(s.URL))
		fmt.Fprintf(tw, "  Ref:\t%s\n", orNone(s.Ref))
		fmt.Fprintf(tw, "  Revision:\t%s\n", orNone(s.Revision))
		fmt.Fprintf(tw, "  Last Fetch:\t%s\n", when(s.LastFetch))
		lastErr := s.LastError
		if lastErr != "" && s.Failures > 0 {
			lastErr += " (" + strconv.Itoa(s.Failures) + " failures in a row)"
		}
		fmt.Fprintf(tw, "  Last Error:\t%s\n", orNone(lastErr))
		tw.Flush()
	} else {
		fmt.Fprintf(tw, "Source:\t<none> (the server reconciles nothing)\n")
	}
	// A flush ends an aligned block: each section aligns on its own.
	tw.Flush()
	if c := rep.LastApplied; c != nil {
		fmt.Fprintf(tw, "Last Applied Commit:\n")
		fmt.Fprintf(tw, "  SHA:\t%s\n", c.Spec.SHA)
		fmt.Fprintf(tw, "  Phase:\t%s\n", orNone(string(c.Status.Phase)))
		fmt.Fprintf(tw, "  Tenants:\t%s\n", commitTenants(c))
		fmt.Fprintf(tw, "  Author:\t%s\n", orNone(c.Spec.Author))
		fmt.Fprintf(tw, "  Message:\t%s\n", orNone(firstLine(c.Spec.Message, 72)))
		fmt.Fprintf(tw, "  Finished:\t%s\n", when(c.Status.Timings.FinishedAt))
		tw.Flush()
	} else if st.Reconciler != nil && st.Reconciler.LastAppliedCommit != "" {
		fmt.Fprintf(tw, "Last Applied Commit:\t%s\n", st.Reconciler.LastAppliedCommit)
	} else {
		fmt.Fprintf(tw, "Last Applied Commit:\t<none>\n")
	}
	n := st.Counts
	fmt.Fprintf(tw, "Resources:\t%d tenants, %d node groups, %d config patches, %d machines, %d commits\n", n.Tenants, n.NodeGroups, n.ConfigPatches, n.Machines, n.Commits)
	if len(rep.FailingTenants) == 0 {
		fmt.Fprintf(tw, "Failing Tenants:\t<none>\n")
		return tw.Flush()
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Failing Tenants:\n")
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  NAME\tRESULT\tCOMMIT\tERROR\n")
	for _, f := range rep.FailingTenants {
		msg := f.Error
		if m := errorSummary(f.Message, 200); m != "" && m != f.Error {
			if msg != "" {
				msg += "; "
			}
			msg += m
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Name, orNone(f.Phase), orNone(f.Commit), orNone(firstLine(msg, 160)))
	}
	return tw.Flush()
}
