package reconciler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rezuscloud/rezuscloud/backup"
	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Restores of a tenant's etcd, declared in git. A commit that sets
// spec.restore.backup to a backup's ID, and carries the trailer
// "Rezuscloud-Allow-Restore: TENANT", restores that backup once per value
// (talos.Plane.Restore records each phase and resumes after a restart):
//
//   - RestoreGuard stalls the tenant when the commit lacks the trailer;
//   - RestoreState, when the tenant has no TF state (a new server, the
//     machines gone), puts the backup's state in its place, so that tofu
//     creates the machines again with the secrets bundle of the backup and
//     the kubeconfigs issued before still work;
//   - Bootstrap does nothing while the restore is pending;
//   - Restore checks the backup (it decrypts, its hashes match, it is the
//     tenant's), takes a snapshot of what is left, and has the plane
//     bring the control planes back on the backup's data.

// TrailerAllowRestore in a commit message allows that commit to restore
// the etcd of the tenants it names from the backup their spec.restore
// gives.
const TrailerAllowRestore = "Rezuscloud-Allow-Restore"

// restoreValue is the backup the tenant's manifests ask to restore, when
// that restore is not done yet; "" otherwise.
//
// A restore that has begun is driven to its end even when a later commit
// asks for another value or none: a cluster half restored has no etcd,
// and its bootstrap is the restore's.
func (t *tenantRun) restoreValue() (string, error) {
	if t.r.opts.Talos == nil {
		return "", nil
	}
	rec, ok, err := t.r.opts.Talos.Restored(t.name)
	if err != nil {
		return "", retry(schema.ReasonStoreError, err)
	}
	if ok && rec.Phase != "" && rec.Phase != talos.RestoreDone {
		return rec.Value, nil
	}
	rs := t.desired.Tenant.Spec.Restore
	if rs == nil || rs.Backup == "" || (ok && rec.Value == rs.Backup && rec.Phase == talos.RestoreDone) {
		return "", nil
	}
	return rs.Backup, nil
}

// restoreGuard stalls a tenant whose manifests ask for a restore that the
// commit does not allow. A restore already under way for the same value
// goes on.
func (t *tenantRun) restoreGuard(context.Context) (stepResult, error) {
	value, err := t.restoreValue()
	if err != nil || value == "" {
		return stepNext, err
	}
	if rec, ok, _ := t.r.opts.Talos.Restored(t.name); ok && rec.Value == value {
		return stepNext, nil
	}
	if t.r.backups == nil {
		return stepNext, stall(schema.ReasonRestoreFailed, fmt.Errorf("spec.restore asks to restore backup %s, but %w", value, ErrNoBackupStore))
	}
	if !trailerNames(t.job.run.snap.Trailers, TrailerAllowRestore, t.name) {
		return stepNext, stall(schema.ReasonRestoreNotAllowed, fmt.Errorf(
			"spec.restore asks to restore the etcd of tenant %s from backup %s, which replaces everything its Kubernetes holds now; nothing was done. To restore it, add the trailer \"%s: %s\" to the commit message",
			t.name, value, TrailerAllowRestore, t.name))
	}
	return stepNext, nil
}

// restoreState gives a tenant that has no TF state the state of the
// backup it restores: its machines are then created again with the
// backup's secrets bundle.
func (t *tenantRun) restoreState(ctx context.Context) (stepResult, error) {
	value, err := t.restoreValue()
	if err != nil || value == "" {
		return stepNext, err
	}
	var have bool
	if err := t.r.store.View(func(tx store.Tx) error {
		have = len(store.CurrentState(tx, t.name)) > 0
		return nil
	}); err != nil || have {
		return stepNext, err
	}
	b, err := t.openBackup(ctx, value)
	if err != nil {
		return stepNext, err
	}
	state, err := b.State(ctx)
	if err != nil {
		return stepNext, stall(schema.ReasonRestoreFailed, err)
	}
	if len(state) == 0 {
		return stepNext, stall(schema.ReasonRestoreFailed, fmt.Errorf("backup %s holds no TF state", value))
	}
	err = t.r.store.Update(func(tx store.Tx) error {
		if len(store.CurrentState(tx, t.name)) > 0 {
			return nil
		}
		serial, lineage, err := store.ParseState(state)
		if err != nil {
			return fmt.Errorf("the TF state of backup %s: %w", value, err)
		}
		meta := store.StateMeta{Serial: &serial, Lineage: lineage, Size: int64(len(state)), Time: t.r.opts.Now(), Token: "restore of backup " + value}
		_, err = tx.PutState(t.name, state, meta, 0)
		return err
	})
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	t.r.log.Info("restore: the tenant's TF state comes from the backup", "tenant", t.name, "backup", value)
	return stepNext, nil
}

// openBackup opens and verifies the backup value of the tenant; a backup
// that is not there, does not decrypt, does not match its manifest or is
// another tenant's stalls the run.
func (t *tenantRun) openBackup(ctx context.Context, value string) (*backup.Backup, error) {
	if t.r.backups == nil {
		return nil, stall(schema.ReasonRestoreFailed, ErrNoBackupStore)
	}
	b, err := backup.Open(ctx, t.r.backups.o.Store, t.r.backups.o.Keys, t.name, value)
	if err == nil {
		err = b.Verify(ctx)
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, retry(schema.ReasonRestoreFailed, err)
		}
		return nil, stall(schema.ReasonRestoreFailed, fmt.Errorf("restore of backup %s refused: %w", value, err))
	}
	return b, nil
}

// restore restores the tenant's etcd from the backup its manifests name
// (Plane.Restore), once per value.
func (t *tenantRun) restore(ctx context.Context) (stepResult, error) {
	value, err := t.restoreValue()
	if err != nil || value == "" || !t.planeWorks() {
		return stepNext, err
	}
	pl := t.r.opts.Talos
	if rec, ok, _ := pl.Restored(t.name); !ok || rec.Value != value {
		if _, err := t.openBackup(ctx, value); err != nil {
			return stepNext, err
		}
		t.snapshotLeft(ctx, value)
	}
	open := func(ctx context.Context) (io.ReadCloser, error) {
		b, err := backup.Open(ctx, t.r.backups.o.Store, t.r.backups.o.Keys, t.name, value)
		if err != nil {
			return nil, err
		}
		return b.Snapshot(ctx)
	}
	rec, err := pl.Restore(ctx, t.name, t.bundle, talos.MachinesOf(t.machines), value, open)
	t.recordRestore(rec, err)
	if err == nil && rec.Phase == talos.RestoreDone {
		t.planeActions().Restore = value
	}
	return stepNext, talosError(err)
}

// snapshotLeft takes a backup of what is left of the tenant's etcd before
// a restore replaces it, when one can be taken: a cluster that lost its
// etcd has nothing to take, and the restore goes on.
func (t *tenantRun) snapshotLeft(ctx context.Context, value string) {
	gate := t.snapshotGate()
	if gate == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	id, err := gate(ctx, "before the restore of "+value)
	if err != nil {
		t.r.log.Info("restore: no snapshot of what is left", "tenant", t.name, "err", redact.Text(err.Error()))
		return
	}
	t.r.log.Info("restore: snapshot of what was left", "tenant", t.name, "backup", id)
	if err := t.r.opts.Talos.NotePreSnapshot(t.name, value, id); err != nil {
		t.r.log.Error("restore: record the snapshot of what was left", "tenant", t.name, "err", err)
	}
}

// recordRestore writes where the restore stands into status.backup.restore.
func (t *tenantRun) recordRestore(rec talos.RestoreRecord, err error) {
	rs := &schema.RestoreStatus{Backup: rec.Value, Phase: rec.Phase, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt}
	if err != nil {
		rs.Message = redact.Text(err.Error())
	}
	if werr := t.r.recordRestoreStatus(t.name, rs); werr != nil {
		t.r.log.Error("record the restore", "tenant", t.name, "err", werr)
	}
}

// recordRestoreStatus writes rs into the tenant's status.backup.restore.
func (r *Reconciler) recordRestoreStatus(tenant string, rs *schema.RestoreStatus) error {
	_, err := status.WriteChanged(r.store, r.opts.Now(), func(rec status.Recorder) (bool, error) {
		return rec.Restoring(tenant, rs)
	})
	return err
}
