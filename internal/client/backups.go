package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
)

// BackupsPath lists a tenant's backups (GET) and requests one (POST).
func BackupsPath(tenant string) string { return TenantPath(tenant) + "/backups" }

// BackupDownloadPath is the download of one backup of a tenant.
func BackupDownloadPath(tenant, id string) string {
	return BackupsPath(tenant) + "/" + esc(id) + "/download"
}

// ListBackups lists a tenant's backups, oldest first: their metadata only
// (role view). A server without a backup store answers 503.
func (c *Client) ListBackups(ctx context.Context, tenant string) ([]schema.BackupInfo, error) {
	path := BackupsPath(tenant)
	var l api.List[schema.BackupInfo]
	if err := c.Get(ctx, path, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// RequestBackup asks the server to take a backup of the tenant now (role
// edit). It returns once the server queued it; the tenant's
// status.backup and ListBackups show it when it is written.
func (c *Client) RequestBackup(ctx context.Context, tenant string) (*api.BackupResponse, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	path := BackupsPath(tenant)
	b, err := c.post(ctx, path, nil, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	var res api.BackupResponse
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("POST %s: decode answer: %w", path, err)
	}
	return &res, nil
}

// DownloadBackup writes one backup of a tenant to w, as the server stores
// it: a tar of its encrypted objects (role admin; every download is
// audited). It returns the bytes written. The client's timeout bounds the
// wait for the answer to begin, not the transfer, which only ctx bounds;
// a transfer the server breaks off is an error, whatever w has got.
func (c *Client) DownloadBackup(ctx context.Context, tenant, id string, w io.Writer) (int64, error) {
	path := BackupDownloadPath(tenant, id)
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timer *time.Timer
	if c.timeout > 0 {
		timer = time.AfterFunc(c.timeout, cancel)
	}
	resp, err := c.do(reqCtx, path, nil, "application/x-tar")
	if timer != nil && !timer.Stop() && ctx.Err() == nil {
		if err == nil {
			resp.Body.Close()
		}
		return 0, fmt.Errorf("GET %s: the download did not begin within %v", path, c.timeout)
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	cw := &countingWriter{w: w}
	if _, err := io.Copy(cw, resp.Body); err != nil {
		switch {
		case cw.err != nil:
			return cw.n, cw.err
		case ctx.Err() != nil:
			return cw.n, ctx.Err()
		}
		return cw.n, fmt.Errorf("GET %s: the server broke the download off after %d bytes: %w", path, cw.n, err)
	}
	return cw.n, nil
}

// countingWriter counts what reaches w and keeps w's own error apart from
// the body's.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	if err != nil {
		cw.err = err
	}
	return n, err
}
