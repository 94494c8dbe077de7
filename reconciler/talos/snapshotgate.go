package talos

import (
	"context"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/schema"
)

// SnapshotGate takes a backup of a tenant's etcd before a risky step and
// returns its ID: reason says which step ("before the upgrade of Talos to
// 1.14.1"). The reconciler gives it (Desired.Snapshot); it waits for the
// backup to be written.
type SnapshotGate func(ctx context.Context, reason string) (id string, err error)

// Relied is what a risky step relied on: the snapshot taken before it,
// or why it went ahead without one.
type Relied struct {
	Snapshot string    `json:"snapshot,omitempty"`
	Skipped  string    `json:"skipped,omitempty"`
	At       time.Time `json:"at"`
}

// snapshotBefore takes the snapshot a risky step relies on, once: *rel
// records it, and a step that has one (after a restart too) takes no
// other. When the tenant declares backups (d.SnapshotRequired), a
// snapshot that fails holds the step back with a *WaitingError; otherwise
// the step goes ahead, and *rel says why it has none. save records *rel
// before the step starts.
func (pl *Plane) snapshotBefore(ctx context.Context, d Desired, rel **Relied, what string, save func() error) error {
	if *rel != nil || d.Snapshot == nil {
		return nil
	}
	id, err := d.Snapshot(ctx, "before "+what)
	r := &Relied{Snapshot: id, At: pl.opts.Now()}
	if err != nil {
		msg := redact.Text(err.Error())
		if d.SnapshotRequired {
			return &WaitingError{Tenant: d.Tenant, Reason: "a snapshot of etcd before " + what + ": " + msg, Cause: schema.ReasonBackupFailed}
		}
		pl.log.Warn("no snapshot before a risky step", "tenant", d.Tenant, "step", what, "err", msg)
		r.Skipped = "the snapshot failed and the tenant declares no backups: " + msg
	} else {
		pl.log.Info("snapshot before a risky step", "tenant", d.Tenant, "step", what, "backup", id)
	}
	*rel = r
	return save()
}
