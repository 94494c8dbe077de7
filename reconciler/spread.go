package reconciler

import (
	"context"
	"sort"
)

// Spreader is implemented by Owners that weigh their shards by the
// tenants in them (the replicas'): the leader tells it every revision's
// tenants before their runs are queued, so that the runs go where the
// tenants are spread evenly.
type Spreader interface {
	// Spread takes every tenant of a revision, and reports whether it
	// recorded new weights.
	Spread(ctx context.Context, tenants []string) (bool, error)
}

// spread tells the replicas the revision's tenants: those it declares and
// those it removes or holds back. A failure only leaves the shards spread
// as before, so it is logged and the revision goes on.
func (run *CommitRun) spread(ctx context.Context) (stepResult, error) {
	sp, ok := run.r.opts.Owners.(Spreader)
	if !ok {
		return stepNext, nil
	}
	seen := map[string]bool{}
	var tenants []string
	for _, td := range run.desired.Tenants {
		seen[td.Tenant.Metadata.Name] = true
		tenants = append(tenants, td.Tenant.Metadata.Name)
	}
	for name := range run.applied {
		if !seen[name] {
			tenants = append(tenants, name)
		}
	}
	sort.Strings(tenants)
	wrote, err := sp.Spread(ctx, tenants)
	switch {
	case err != nil:
		run.r.log.Warn("spread the tenants over the replicas", "revision", run.snap.Revision, "err", err)
	case wrote:
		run.r.log.Info("the shards are spread by their tenants anew", "revision", run.snap.Revision, "tenants", len(tenants))
	}
	return stepNext, nil
}
