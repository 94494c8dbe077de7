package schema

import (
	"fmt"
	"regexp"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/window"
)

// BackupPolicy is a Tenant's spec.backup: when the server takes a backup
// of the tenant's etcd (with its TF state, encrypted, into the backup
// store the server's operator configured) and how many it keeps. A tenant
// without one has no backups; its status says so (BackupStatus.Declared).
type BackupPolicy struct {
	// Interval is a Go duration of at least a minute, such as "6h": a
	// backup every Interval after the last one. Exactly one of Interval
	// and Schedule is set.
	Interval string `json:"interval,omitempty"`
	// Schedule is a cron expression of five fields, or a descriptor such
	// as "@daily", read in TimeZone: a backup at each time it names.
	Schedule string `json:"schedule,omitempty"`
	// TimeZone is the IANA zone Schedule is read in; empty means UTC. It
	// goes only with Schedule.
	TimeZone string `json:"timeZone,omitempty"`
	// Keep is how many backups are kept, 1 to 1000: the server deletes
	// older ones itself.
	Keep int `json:"keep"`
}

// Bounds of a backup policy.
const (
	MinBackupInterval = time.Minute
	MaxBackupKeep     = 1000
)

// Next is the time of the next backup after after: after plus Interval,
// or the schedule's next time after after. It is the zero time when the
// policy does not parse (Load has checked it, so only for a policy that
// did not come from Load) or when the schedule never comes again.
func (p *BackupPolicy) Next(after time.Time) time.Time {
	if p.Interval != "" {
		d, err := time.ParseDuration(p.Interval)
		if err != nil || d < MinBackupInterval {
			return time.Time{}
		}
		return after.Add(d)
	}
	sched, err := window.ParseSchedule(p.Schedule)
	if err != nil {
		return time.Time{}
	}
	loc, err := window.ParseZone(p.TimeZone)
	if err != nil {
		return time.Time{}
	}
	return sched.Next(after.In(loc))
}

// RestoreSpec is a Tenant's spec.restore: the backup its cluster's etcd is
// restored from. A commit that sets or changes it must carry the trailer
// Rezuscloud-Allow-Restore naming the tenant; a restore runs once per
// Backup value.
type RestoreSpec struct {
	// Backup is the ID of one of the tenant's backups, as rezusctl get
	// backups lists them: "20261205T083000Z-1a2b3c4d".
	Backup string `json:"backup"`
}

// backupIDTime is the layout of the time that starts a backup ID.
const backupIDTime = "20060102T150405Z"

var backupIDRE = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$`)

// CheckBackupID returns what is wrong with a backup ID, or nil: an ID is
// the UTC time the backup was taken, "20261205T083000Z", a dash and 8
// lower-case hex digits.
func CheckBackupID(id string) error {
	if !backupIDRE.MatchString(id) {
		return fmt.Errorf("%q is not a backup ID such as 20261205T083000Z-1a2b3c4d (a UTC time, a dash and 8 hex digits; rezusctl get backups -t TENANT lists them)", id)
	}
	if _, err := time.Parse(backupIDTime, id[:len(backupIDTime)]); err != nil {
		return fmt.Errorf("%q is not a backup ID: %s is not a time", id, id[:len(backupIDTime)])
	}
	return nil
}

// NewBackupID returns the ID of a backup taken at t, with 4 random bytes
// given by the caller.
func NewBackupID(t time.Time, random [4]byte) string {
	return fmt.Sprintf("%s-%x", t.UTC().Format(backupIDTime), random[:])
}

// BackupStatus is a Tenant's status.backup: where its backups stand. It is
// there for every tenant the server has reconciled, with Declared false
// when the tenant has no spec.backup ("no etcd backup"), so that the
// default is visible.
type BackupStatus struct {
	// Declared says that the tenant has a spec.backup.
	Declared bool `json:"declared"`
	// LastSuccess is when the last backup was written; LastAttempt when
	// the last one started, and LastError why it failed, if it did
	// (cleared by the next success).
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
	LastAttempt time.Time `json:"lastAttempt,omitzero"`
	LastError   string    `json:"lastError,omitempty"`
	// Next is when the next scheduled backup runs.
	Next time.Time `json:"next,omitzero"`
	// Count is how many backups of the tenant the store holds.
	Count int `json:"count"`
	// SizeBytes is the size of the last backup, encrypted, as stored.
	SizeBytes int64 `json:"sizeBytes"`
	// LastID is the ID of the last backup.
	LastID string `json:"lastID,omitempty"`
	// Restore is where a declared restore (spec.restore) stands.
	Restore *RestoreStatus `json:"restore,omitempty"`
}

// RestoreStatus is where the restore of a tenant's etcd from a backup
// stands.
type RestoreStatus struct {
	// Backup is the spec.restore.backup value being restored.
	Backup string `json:"backup"`
	// Phase is the step it is at: wiping, recovering, bootstrapping,
	// joining, kubelets, done.
	Phase string `json:"phase"`
	// Message says it in a sentence, or why it failed.
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// BackupInfo describes one backup: the API's listing of a tenant's
// backups (metadata only) and the manifest stored with it.
type BackupInfo struct {
	// ID names the backup within its tenant: the UTC time it was taken
	// and 8 random hex digits (see CheckBackupID); IDs sort by time.
	ID     string    `json:"id"`
	Tenant string    `json:"tenant"`
	Time   time.Time `json:"time"`
	// Machine is the control plane the etcd snapshot was taken from.
	Machine string     `json:"machine"`
	Etcd    BackupEtcd `json:"etcd"`
	// TalosVersion and KubernetesVersion are the cluster's at the time.
	TalosVersion      string `json:"talosVersion,omitempty"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Commit is the revision the tenant had applied at the time.
	Commit string `json:"commit,omitempty"`
	// Reason says why it was taken: scheduled, requested (by whom), or
	// before a risky step (an upgrade, a restore).
	Reason string `json:"reason,omitempty"`
	// Parts are the backup's parts by name, "snapshot" and "state", as
	// they were before encryption.
	Parts map[string]BackupPart `json:"parts"`
	// SizeBytes is the sum of the encrypted objects' sizes.
	SizeBytes int64 `json:"sizeBytes"`
}

// BackupEtcd is what the source member's etcd said before the snapshot.
type BackupEtcd struct {
	RaftIndex   uint64 `json:"raftIndex"`
	DBSizeBytes int64  `json:"dbSizeBytes"`
}

// BackupPart is one part of a backup before encryption: its SHA-256 (hex)
// and size.
type BackupPart struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// checkBackup checks a Tenant's spec.backup and spec.restore, each problem
// at its own line: the interval (a Go duration of at least a minute) or
// the schedule and its zone, never both and never neither, a time zone
// only with a schedule, and the restore's backup ID. The schema checks
// the types and keep's bounds.
func checkBackup(d *document, obj map[string]any) []Problem {
	var problems []Problem
	if b, ok := lookup(obj, "/spec/backup").(map[string]any); ok {
		problems = append(problems, checkBackupPolicy(d, b)...)
	}
	if s, ok := lookup(obj, "/spec/restore/backup").(string); ok {
		if err := CheckBackupID(s); err != nil {
			problems = append(problems, d.problem("/spec/restore/backup", "%v", err))
		}
	}
	return problems
}

func checkBackupPolicy(d *document, b map[string]any) []Problem {
	const path = "/spec/backup"
	var problems []Problem
	interval, hasInterval := b["interval"].(string)
	schedule, hasSchedule := b["schedule"].(string)
	_, hasZone := b["timeZone"]
	switch {
	case hasInterval && hasSchedule:
		problems = append(problems, d.problem(path+"/schedule", "give interval or schedule, not both"))
	case !hasInterval && !hasSchedule && b["interval"] == nil && b["schedule"] == nil:
		problems = append(problems, d.problem(path, "give interval (a Go duration such as 6h) or schedule (a cron expression such as \"0 3 * * *\")"))
	}
	if hasInterval {
		if t, err := time.ParseDuration(interval); err != nil {
			problems = append(problems, d.problem(path+"/interval", "interval %q is not a Go duration such as \"6h\" or \"30m\"", interval))
		} else if t < MinBackupInterval {
			problems = append(problems, d.problem(path+"/interval", "interval %q is shorter than a minute", interval))
		}
	}
	if hasSchedule {
		if _, err := window.ParseSchedule(schedule); err != nil {
			problems = append(problems, d.problem(path+"/schedule", "%v", err))
		}
	}
	if hasZone && !hasSchedule {
		problems = append(problems, d.problem(path+"/timeZone", "timeZone goes only with schedule; an interval runs from the last backup, in no zone"))
	} else if s, ok := b["timeZone"].(string); ok {
		if _, err := window.ParseZone(s); err != nil {
			problems = append(problems, d.problem(path+"/timeZone", "%v", err))
		}
	}
	return problems
}

// decodeBackup reads spec.backup of a checked Tenant; nil when absent.
func decodeBackup(v any) *BackupPolicy {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return &BackupPolicy{Interval: asString(m["interval"]), Schedule: asString(m["schedule"]), TimeZone: asString(m["timeZone"]), Keep: asInt(m["keep"])}
}

// decodeRestore reads spec.restore of a checked Tenant; nil when absent.
func decodeRestore(v any) *RestoreSpec {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return &RestoreSpec{Backup: asString(m["backup"])}
}

// BackupDeclared reports whether the tenant declares backups: what its
// status.backup.declared says, or, before the server has written one, its
// spec.backup.
func (t *Tenant) BackupDeclared() bool {
	if t.Status.Backup != nil {
		return t.Status.Backup.Declared
	}
	return t.Spec.Backup != nil
}
