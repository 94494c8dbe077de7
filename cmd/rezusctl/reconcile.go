package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// reconcilePoll is how often reconcile reads a tenant while it waits.
const reconcilePoll = 300 * time.Millisecond

type reconcileOptions struct {
	noWait  bool
	timeout time.Duration
}

const reconcileLong = `Reconcile asks the server to fetch its repository now and to run a failed
tenant's retry now instead of at its backoff (POST /api/v1/reconcile, which
needs a token of role edit). It changes nothing of the desired state: only a
commit does that.

With TENANT it retries that tenant; without, every tenant whose run waits.
Reconcile then waits for each retried tenant's run and prints its outcome,
as 'flux reconcile' does: it exits 0 when every run succeeded, 1 when one
failed again or stalled (a stalled tenant needs a new commit), and 1 after
--timeout. With --no-wait it prints what the server set in motion and
returns at once.`

func newReconcileCmd() *cobra.Command {
	var o reconcileOptions
	cmd := &cobra.Command{
		Use:   "reconcile [TENANT]",
		Short: "Fetch the repository now and retry a failed tenant now",
		Long:  reconcileLong,
		Example: `  rezusctl reconcile production
  rezusctl reconcile --no-wait
  rezusctl reconcile staging --timeout 10m`,
		Args: cobra.MaximumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeFor(cmd, []string{"tenants"}, prefix, nil)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.timeout <= 0 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--timeout %v: want a positive duration", o.timeout)}
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			tenant := ""
			if len(args) == 1 {
				tenant = args[0]
			}
			return apiError(runReconcile(cmd.Context(), c, tenant, o, cmd.OutOrStdout()))
		},
	}
	cmd.Flags().BoolVar(&o.noWait, "no-wait", false, "return once the server accepted the request; do not wait for the runs")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the runs")
	return cmd
}

// runReconcile requests the reconcile and, unless told not to, waits for
// the run of each tenant it queued.
func runReconcile(ctx context.Context, c *client.Client, tenant string, o reconcileOptions, out io.Writer) error {
	before := map[string]*schema.Tenant{}
	if !o.noWait {
		tenants, err := tenantsBefore(ctx, c, tenant)
		if err != nil {
			return err
		}
		for i := range tenants {
			before[tenants[i].Metadata.Name] = &tenants[i]
		}
	}
	res, err := c.Reconcile(ctx, tenant)
	if err != nil {
		return err
	}
	if res.SourceFetch {
		fmt.Fprintln(out, "► fetching the repository")
	}
	if len(res.Tenants) == 0 {
		fmt.Fprintln(out, "✔ no tenant waits to run")
	}
	var failed []string
	for _, t := range res.Tenants {
		fmt.Fprintf(out, "► %s: %s: %s\n", t.Tenant, t.Action, t.Message)
		if t.Action == api.ReconcileStalled {
			failed = append(failed, t.Tenant+" stalled")
		}
	}
	if o.noWait {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for _, t := range res.Tenants {
		if t.Action != api.ReconcileQueued {
			continue
		}
		if err := waitTenant(ctx, c, before[t.Tenant], t.Tenant, out); err != nil {
			if ctx.Err() != nil {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("tenant %s: no outcome within --timeout %v", t.Tenant, o.timeout)}
			}
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("reconcile failed: %v", failed)}
	}
	return nil
}

// tenantsBefore reads the tenant (every tenant when "") before the
// request, so that waitTenant sees what the run changed.
func tenantsBefore(ctx context.Context, c *client.Client, tenant string) ([]schema.Tenant, error) {
	if tenant == "" {
		return c.Tenants(ctx, client.ListOptions{})
	}
	t, err := c.Tenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return []schema.Tenant{*t}, nil
}

// waitTenant reads the tenant until its run has an outcome, printing each
// new phase. The run succeeded when the tenant's retry is gone (or, for a
// tenant that had none, its observed commit moved); it failed when the
// retry counts a further attempt or the tenant stalled.
func waitTenant(ctx context.Context, c *client.Client, before *schema.Tenant, name string, out io.Writer) error {
	var was schema.TenantStatus
	if before != nil {
		was = before.Status
	}
	phase := was.Phase
	tick := time.NewTicker(reconcilePoll)
	defer tick.Stop()
	for {
		t, err := c.Tenant(ctx, name)
		if err != nil {
			return err
		}
		st := t.Status
		if st.Phase != phase {
			phase = st.Phase
			fmt.Fprintf(out, "◎ %s: %s\n", name, orNone(string(phase)))
		}
		if done, err := runOutcome(was, st); done {
			if err != nil {
				fmt.Fprintf(out, "✗ %s: %v\n", name, err)
				return fmt.Errorf("%s: %v", name, err)
			}
			fmt.Fprintf(out, "✔ %s: applied %s\n", name, shortSHA(st.ObservedCommit, ""))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// runOutcome compares a tenant's status before a requested run with its
// status now: whether the run has finished, and how it failed.
func runOutcome(was, now schema.TenantStatus) (bool, error) {
	stalledNow := now.Conditions.IsTrue(schema.ConditionStalled)
	if stalledNow && !was.Conditions.IsTrue(schema.ConditionStalled) {
		return true, fmt.Errorf("stalled: %s", firstLine(now.Message, 200))
	}
	switch {
	case now.Retry != nil && (was.Retry == nil || now.Retry.Attempts > was.Retry.Attempts ||
		!now.Retry.NextAttemptAt.Equal(was.Retry.NextAttemptAt)):
		return true, fmt.Errorf("failed again (attempt %d, next at %s): %s", now.Retry.Attempts,
			now.Retry.NextAttemptAt.UTC().Format(time.RFC3339), firstLine(now.Message, 200))
	case now.Retry == nil && was.Retry != nil:
		return true, nil
	case was.Retry == nil && now.ObservedCommit != was.ObservedCommit:
		return true, nil
	}
	return false, nil
}
