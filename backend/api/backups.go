package api

// BackupResponse is the 202 answer of POST /api/v1/tenants/{name}/backups:
// the backup was queued; it runs in the server's backup worker, and the
// tenant's status.backup and the listing show it when it is done.
type BackupResponse struct {
	Accepted bool   `json:"accepted"`
	Message  string `json:"message"`
}
