package schema

import "time"

// BackupInfo describes one backup of a tenant's etcd: what the listing
// shows and what a backup's manifest holds. It is metadata only; the
// backup's data never travels in it.
type BackupInfo struct {
	ID                string                `json:"id"`
	Tenant            string                `json:"tenant"`
	Time              time.Time             `json:"time"`
	Machine           string                `json:"machine,omitempty"` // the control plane the snapshot came from
	Etcd              BackupEtcd            `json:"etcd"`
	TalosVersion      string                `json:"talosVersion,omitempty"`
	KubernetesVersion string                `json:"kubernetesVersion,omitempty"`
	Commit            string                `json:"commit,omitempty"` // the commit applied when the backup was taken
	Reason            string                `json:"reason,omitempty"` // why it was taken: schedule, on demand, before a step
	Parts             map[string]BackupPart `json:"parts"`            // "snapshot", "state"
	SizeBytes         int64                 `json:"sizeBytes"`        // of the stored (encrypted) objects
}

// BackupEtcd is what the source member's etcd said before the snapshot.
type BackupEtcd struct {
	RaftIndex   uint64 `json:"raftIndex"`
	DBSizeBytes int64  `json:"dbSizeBytes"`
}

// BackupPart is one decrypted part of a backup: its SHA-256 (hex) and size.
type BackupPart struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}
