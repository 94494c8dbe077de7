package status

import (
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Backup is the outcome of one etcd backup of a tenant.
type Backup struct {
	// Attempt is when it started.
	Attempt time.Time
	// Info is the backup written; empty after a failure.
	Info schema.BackupInfo
	// Next is when the next one is due; zero when none is scheduled.
	Next time.Time
	// Count is how many backups the tenant has now; negative when that is
	// not known (the count stays as recorded).
	Count int
	// Err is why it failed; nil for a success.
	Err error
}

// BackedUp records the outcome of a tenant's etcd backup in its
// status.backup and its BackupFailed condition: set by a failure, removed
// by a success. A tenant that is not stored is left alone.
func (r Recorder) BackedUp(name string, b Backup) (changed bool, err error) {
	t, _, err := r.tenant(name, nil)
	if err != nil || t == nil {
		return false, err
	}
	old := t.Status
	bs := schema.BackupStatus{Declared: t.Spec.Backup != nil}
	if t.Status.Backup != nil {
		bs = *t.Status.Backup
	}
	bs.LastAttempt, bs.Next = b.Attempt, b.Next
	if b.Err != nil {
		bs.LastError = b.Err.Error()
		t.Status.Conditions = t.Status.Conditions.Set(BackupFailed(bs.LastError, t.Metadata.Generation), r.now)
	} else {
		bs.LastError = ""
		bs.LastSuccess, bs.LastID, bs.SizeBytes = b.Info.Time, b.Info.ID, b.Info.SizeBytes
		if b.Count >= 0 {
			bs.Count = b.Count
		}
		t.Status.Conditions = t.Status.Conditions.Remove(schema.ConditionBackupFailed)
	}
	t.Status.Backup = &bs
	if sameJSON(old, t.Status) {
		return false, nil
	}
	if r.check {
		return true, nil
	}
	return true, r.putTenant(name, t)
}

// BackupFailed is the condition of a tenant whose last etcd backup failed.
func BackupFailed(msg string, gen int64) schema.Condition {
	return schema.Condition{Type: schema.ConditionBackupFailed, Status: schema.ConditionTrue, Reason: schema.ReasonBackupFailed,
		Message: "the last etcd backup failed: " + msg, ObservedGeneration: gen}
}

// backupDeclared keeps status.backup.declared as the tenant's spec says:
// a tenant without spec.backup shows "no etcd backup".
func backupDeclared(t *schema.Tenant) {
	if t.Status.Backup == nil {
		t.Status.Backup = &schema.BackupStatus{}
	}
	t.Status.Backup.Declared = t.Spec.Backup != nil
	if !t.Status.Backup.Declared {
		t.Status.Backup.Next = time.Time{}
		t.Status.Conditions = t.Status.Conditions.Remove(schema.ConditionBackupFailed)
	}
}

// Restoring records where a declared restore of the tenant's etcd stands,
// in status.backup.restore.
func (r Recorder) Restoring(name string, rs *schema.RestoreStatus) (changed bool, err error) {
	t, _, err := r.tenant(name, nil)
	if err != nil || t == nil {
		return false, err
	}
	old := t.Status
	if t.Status.Backup == nil {
		t.Status.Backup = &schema.BackupStatus{Declared: t.Spec.Backup != nil}
	} else {
		bs := *t.Status.Backup
		t.Status.Backup = &bs
	}
	t.Status.Backup.Restore = rs
	if sameJSON(old, t.Status) {
		return false, nil
	}
	if r.check {
		return true, nil
	}
	if err := r.restoreHistory(name, old.Backup, rs); err != nil {
		return false, err
	}
	return true, r.putTenant(name, t)
}
