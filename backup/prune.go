package backup

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// leftoverAge is how old the objects of a backup without a manifest must
// be before Prune deletes them: a Write in flight has none yet.
const leftoverAge = time.Hour

// now is the clock of Prune; tests move it.
var now = time.Now

// sweeper is a store that can remove what a Put cut short by a crash of the
// server leaves behind and List does not show: temporary files, incomplete
// multipart uploads; those started before before, under prefix.
type sweeper interface {
	sweep(ctx context.Context, prefix string, before time.Time) error
}

// Prune deletes the tenant's complete backups beyond the newest keep, and
// leftovers of incomplete ones (no manifest) older than an hour, also
// those that List does not show (temporary files, incomplete uploads).
// Returns the IDs it deleted, oldest first.
func Prune(ctx context.Context, st Store, k *Keys, tenant string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("prune backups of %s: keep %d: keep at least one", tenant, keep)
	}
	ms, err := List(ctx, st, k, tenant)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	keys, err := st.List(ctx, tenant+"/")
	if err != nil {
		return nil, fmt.Errorf("prune backups of %s: %w", tenant, err)
	}
	complete := map[string]bool{}
	for _, m := range ms {
		complete[m.ID] = true
	}
	var doomed []string
	for _, m := range ms[:max(len(ms)-keep, 0)] {
		doomed = append(doomed, m.ID)
	}
	now := now()
	for _, key := range keys {
		id, _, ok := splitKey(tenant, key)
		if !ok || complete[id] || slices.Contains(doomed, id) {
			continue
		}
		if age, ok := idAge(id, now); ok && age > leftoverAge {
			doomed = append(doomed, id)
		}
	}
	slices.Sort(doomed)
	var deleted []string
	for _, id := range doomed {
		if err := deleteBackup(ctx, st, tenant, id); err != nil {
			return deleted, fmt.Errorf("prune backup %s of %s: %w", id, tenant, err)
		}
		deleted = append(deleted, id)
	}
	if sw, ok := st.(sweeper); ok {
		if err := sw.sweep(ctx, tenant+"/", now.Add(-leftoverAge)); err != nil {
			return deleted, fmt.Errorf("prune backups of %s: %w", tenant, err)
		}
	}
	return deleted, nil
}
