package client_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// backupServer is a server with tokens of every role, the tenant
// production and two of its backups.
func backupServer(t *testing.T) (*backend.Server, map[string]string, *servertest.Backups) {
	t.Helper()
	file, tokens := servertest.Tokens(t, map[string]string{"viewer": "view", "editor": "edit", "admin": "admin"})
	srv := servertest.StartBackend(t, backend.Config{TokensFile: file}, nil)
	(&server{Server: srv}).put(t, tenant("production", nil, schema.TenantActive))
	b := &servertest.Backups{}
	b.Add(schema.BackupInfo{ID: "20261205T020000Z-0a0b0c0d", Tenant: "production", Time: time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC), Machine: "production-cp-0", SizeBytes: 2048},
		schema.BackupInfo{ID: "20261205T080000Z-1a2b3c4d", Tenant: "production", Time: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), Machine: "production-cp-1", SizeBytes: 4096,
			Parts: map[string]schema.BackupPart{"snapshot": {SHA256: strings.Repeat("ab", 32), Size: 3000}}})
	srv.ServeBackups(b, nil)
	return srv, tokens, b
}

func TestBackups(t *testing.T) {
	srv, tokens, b := backupServer(t)
	viewer := newClient(t, srv.URL(), tokens["viewer"], nil)
	list, err := viewer.ListBackups(ctx(t), "production")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].ID != "20261205T080000Z-1a2b3c4d" || list[1].Parts["snapshot"].Size != 3000 || !list[0].Time.Equal(time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("ListBackups = %+v", list)
	}
	if _, err := viewer.RequestBackup(ctx(t), "production"); client.Code(err) != http.StatusForbidden {
		t.Errorf("RequestBackup as view = %v, want 403", err)
	}

	editor := newClient(t, srv.URL(), tokens["editor"], nil)
	res, err := editor.RequestBackup(ctx(t), "production")
	if err != nil || !res.Accepted || !strings.Contains(res.Message, "queued") {
		t.Fatalf("RequestBackup = %+v, %v", res, err)
	}
	if got := strings.Join(b.Requested(), ","); got != "production by editor" {
		t.Errorf("requested %q", got)
	}
	var buf bytes.Buffer
	if _, err := editor.DownloadBackup(ctx(t), "production", "20261205T080000Z-1a2b3c4d", &buf); client.Code(err) != http.StatusForbidden || buf.Len() != 0 {
		t.Errorf("DownloadBackup as edit = %v with %d bytes, want 403 and nothing", err, buf.Len())
	}

	admin := newClient(t, srv.URL(), tokens["admin"], nil)
	n, err := admin.DownloadBackup(ctx(t), "production", "20261205T080000Z-1a2b3c4d", &buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("DownloadBackup = %d, %v (%d bytes written)", n, err, buf.Len())
	}
	tr := tar.NewReader(&buf)
	for _, name := range servertest.BackupObjects {
		h, err := tr.Next()
		if err != nil || h.Name != "production/20261205T080000Z-1a2b3c4d/"+name {
			t.Fatalf("tar entry %v, %v, want %s", h, err, name)
		}
		body, _ := io.ReadAll(tr)
		if string(body) != servertest.Object("production", "20261205T080000Z-1a2b3c4d", name) {
			t.Errorf("%s holds %q", name, body)
		}
	}
	if _, err := admin.DownloadBackup(ctx(t), "production", "20261205T090000Z-00000000", io.Discard); !client.IsNotFound(err) {
		t.Errorf("DownloadBackup of an unknown backup = %v, want 404", err)
	}
	if _, err := admin.ListBackups(ctx(t), "nope"); !client.IsNotFound(err) || !strings.Contains(err.Error(), `tenant "nope" not found`) {
		t.Errorf("ListBackups of an unknown tenant = %v", err)
	}

	srv.ServeBackups(nil, nil)
	_, err = admin.ListBackups(ctx(t), "production")
	if client.Code(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "no backup store is configured") {
		t.Errorf("ListBackups without a backup store = %v", err)
	}
}

// failingWriter fails every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestDownloadBackupWriteError: an error of the writer comes back as it
// is, not as one of the server.
func TestDownloadBackupWriteError(t *testing.T) {
	srv, tokens, _ := backupServer(t)
	admin := newClient(t, srv.URL(), tokens["admin"], nil)
	_, err := admin.DownloadBackup(ctx(t), "production", "20261205T080000Z-1a2b3c4d", failingWriter{})
	if err == nil || err.Error() != "no space left on device" {
		t.Errorf("DownloadBackup into a full disk = %v", err)
	}
}
