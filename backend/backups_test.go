package backend

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// backupShelf is a small Backups over backups kept in memory: tenant
// "alpha" has two, "failing" fails every call with an error that names a
// path, and "broken" breaks its download off after the first bytes.
type backupShelf struct {
	mu        sync.Mutex
	requested []string // "tenant by"
}

const backupShelfFailure = "open /var/lib/rezuscloud/backups/failing: permission denied"

var shelved = []schema.BackupInfo{
	{ID: "20261205T020000Z-0a0b0c0d", Tenant: "alpha", Time: time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC), Machine: "alpha-cp-0",
		Etcd: schema.BackupEtcd{RaftIndex: 41, DBSizeBytes: 1 << 20}, TalosVersion: "1.12.6", KubernetesVersion: "1.34.1", Commit: "3f2a9c1e0b7d", Reason: "scheduled",
		Parts: map[string]schema.BackupPart{"snapshot": {SHA256: strings.Repeat("ab", 32), Size: 1 << 20}, "state": {SHA256: strings.Repeat("cd", 32), Size: 4096}}, SizeBytes: 1<<20 + 5000},
	{ID: "20261205T080000Z-1a2b3c4d", Tenant: "alpha", Time: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), Machine: "alpha-cp-1", Reason: "requested by editor",
		Parts: map[string]schema.BackupPart{"snapshot": {SHA256: strings.Repeat("ef", 32), Size: 2 << 20}}, SizeBytes: 2<<20 + 900},
}

func (b *backupShelf) ListBackups(_ context.Context, tenant string) ([]schema.BackupInfo, error) {
	switch tenant {
	case "alpha":
		return shelved, nil
	case "failing":
		return nil, errors.New(backupShelfFailure)
	}
	return nil, nil
}

func (b *backupShelf) RequestBackup(_ context.Context, tenant, by string) error {
	if tenant == "failing" {
		return errors.New(backupShelfFailure)
	}
	if tenant == "busy" {
		return api.Errorf(http.StatusConflict, "a backup of tenant busy is under way")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requested = append(b.requested, tenant+" "+by)
	return nil
}

func (b *backupShelf) DownloadBackup(_ context.Context, tenant, id string, w io.Writer) error {
	switch tenant {
	case "failing":
		return errors.New(backupShelfFailure)
	case "broken":
		if _, err := w.Write(bytes.Repeat([]byte{'x'}, 1024)); err != nil {
			return err
		}
		return errors.New("read s3://bucket/broken/" + id + "/snapshot.age: connection reset")
	}
	if tenant != "alpha" || (id != shelved[0].ID && id != shelved[1].ID) {
		return fmt.Errorf("backup %s of tenant %s: %w", id, tenant, store.ErrNotFound)
	}
	tw := tar.NewWriter(w)
	for _, name := range []string{"manifest.age", "snapshot.age", "state.age"} {
		body := "age-encryption.org/v1 " + name
		if err := tw.WriteHeader(&tar.Header{Name: tenant + "/" + id + "/" + name, Mode: 0o600, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// startBackups runs a server with tokens and the tenants alpha, failing,
// broken and busy, whose backup endpoints answer from a backupShelf.
func startBackups(t *testing.T) (*testServer, *backupShelf, *syncBuffer) {
	t.Helper()
	ts := startServer(t, Config{}, true)
	err := ts.Store().Update(func(tx store.Tx) error {
		for _, name := range []string{"alpha", "failing", "broken", "busy"} {
			tn := &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: name}}
			if _, err := tx.PutObject(schema.KindTenant, name, tn); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	shelf := &backupShelf{}
	audit := &syncBuffer{}
	ts.ServeBackups(shelf, slog.New(slog.NewTextHandler(audit, nil)))
	return ts, shelf, audit
}

// TestBackupsList: view lists a tenant's backups, metadata only, in the
// API's list shape with lower-camel names.
func TestBackupsList(t *testing.T) {
	ts, _, _ := startBackups(t)
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/backups", token: "viewer"})
	wantCode(t, "list", code, body, http.StatusOK)
	var l api.List[schema.BackupInfo]
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Total != 2 || len(l.Items) != 2 || l.Items[1].ID != shelved[1].ID || l.Items[0].Etcd.RaftIndex != 41 {
		t.Errorf("list = %+v", l)
	}
	for _, key := range []string{`"id":"20261205T020000Z-0a0b0c0d"`, `"tenant":"alpha"`, `"time":"2026-12-05T02:00:00Z"`, `"etcd":{"raftIndex":41,"dbSizeBytes":1048576}`,
		`"sha256":"` + strings.Repeat("ab", 32) + `"`, `"sizeBytes":1053576`, `"reason":"scheduled"`, `"total":2`} {
		if !strings.Contains(string(body), key) {
			t.Errorf("list lacks %s: %s", key, body)
		}
	}
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tenants/busy/backups", token: "viewer"})
	wantCode(t, "empty list", code, body, http.StatusOK)
	if string(body) != `{"items":[],"total":0}`+"\n" {
		t.Errorf("empty list = %s", body)
	}
}

// TestBackupsRequest: edit queues a backup, named by its token; view may
// not; the body is empty or {}.
func TestBackupsRequest(t *testing.T) {
	ts, shelf, _ := startBackups(t)
	code, body := ts.do(t, req{method: "POST", path: "/api/v1/tenants/alpha/backups", token: "editor"})
	wantCode(t, "request", code, body, http.StatusAccepted)
	var res api.BackupResponse
	if err := json.Unmarshal(body, &res); err != nil || !res.Accepted || !strings.Contains(res.Message, "tenant alpha is queued") {
		t.Errorf("answer %s (%v)", body, err)
	}
	code, body = ts.do(t, req{method: "POST", path: "/api/v1/tenants/alpha/backups", token: "admin", body: []byte(" { } ")})
	wantCode(t, "request with {}", code, body, http.StatusAccepted)
	if got := strings.Join(shelf.requested, ","); got != "alpha editor,alpha admin" {
		t.Errorf("requested %q, want alpha by editor, then by admin", got)
	}
	code, body = ts.do(t, req{method: "POST", path: "/api/v1/tenants/alpha/backups", token: "viewer"})
	wantCode(t, "request by view", code, body, http.StatusForbidden)
	wantAPIError(t, body, http.StatusForbidden, api.ReasonForbidden, "requesting a backup needs edit")
	code, body = ts.do(t, req{method: "POST", path: "/api/v1/tenants/alpha/backups", token: "editor", body: []byte(`{"now": true}`)})
	wantCode(t, "request with a body", code, body, http.StatusBadRequest)
	wantAPIError(t, body, http.StatusBadRequest, api.ReasonBadRequest, "want no body or {}")
	code, body = ts.do(t, req{method: "POST", path: "/api/v1/tenants/busy/backups", token: "editor"})
	wantCode(t, "request refused by the Backups", code, body, http.StatusConflict)
	wantAPIError(t, body, http.StatusConflict, api.ReasonConflict, "under way")
	if len(shelf.requested) != 2 {
		t.Errorf("refused requests reached the Backups: %v", shelf.requested)
	}
}

// TestBackupsErrors: an unknown tenant answers 404 on every endpoint,
// before the Backups are asked; a failure of the Backups answers 500
// without repeating its error, which goes to the log.
func TestBackupsErrors(t *testing.T) {
	ts, _, _ := startBackups(t)
	for _, r := range []req{
		{method: "GET", path: "/api/v1/tenants/gamma/backups", token: "viewer"},
		{method: "POST", path: "/api/v1/tenants/gamma/backups", token: "editor"},
		{method: "GET", path: "/api/v1/tenants/gamma/backups/20261205T080000Z-1a2b3c4d/download", token: "admin"},
	} {
		code, body := ts.do(t, r)
		wantCode(t, r.method+" "+r.path, code, body, http.StatusNotFound)
		wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, `tenant "gamma" not found`)
	}
	for _, r := range []req{
		{method: "GET", path: "/api/v1/tenants/failing/backups", token: "viewer"},
		{method: "POST", path: "/api/v1/tenants/failing/backups", token: "editor"},
		{method: "GET", path: "/api/v1/tenants/failing/backups/20261205T080000Z-1a2b3c4d/download", token: "admin"},
	} {
		code, body := ts.do(t, r)
		wantCode(t, r.method+" "+r.path, code, body, http.StatusInternalServerError)
		wantAPIError(t, body, http.StatusInternalServerError, api.ReasonInternalError, "server log")
		if strings.Contains(string(body), "/var/lib") {
			t.Errorf("%s %s: the answer repeats the error: %s", r.method, r.path, body)
		}
	}
	if n := strings.Count(ts.logs.String(), "permission denied"); n < 3 {
		t.Errorf("the log has the error %d times, want once per failure:\n%s", n, ts.logs.String())
	}
	code, body := ts.do(t, req{method: "DELETE", path: "/api/v1/tenants/alpha/backups", token: "admin"})
	wantCode(t, "DELETE", code, body, http.StatusMethodNotAllowed)
}

// TestBackupsNoStore: a server without a backup store answers every
// backup endpoint 503, saying so, after the role check.
func TestBackupsNoStore(t *testing.T) {
	ts, _, _ := startBackups(t)
	ts.ServeBackups(nil, nil)
	for _, r := range []req{
		{method: "GET", path: "/api/v1/tenants/alpha/backups", token: "viewer"},
		{method: "POST", path: "/api/v1/tenants/alpha/backups", token: "editor"},
		{method: "GET", path: "/api/v1/tenants/alpha/backups/20261205T080000Z-1a2b3c4d/download", token: "admin"},
	} {
		code, body := ts.do(t, r)
		wantCode(t, r.method+" "+r.path, code, body, http.StatusServiceUnavailable)
		wantAPIError(t, body, http.StatusServiceUnavailable, api.ReasonInternalError, "no backup store is configured")
	}
	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/backups/20261205T080000Z-1a2b3c4d/download", token: "editor"})
	wantCode(t, "download by edit", code, body, http.StatusForbidden)
}

// TestBackupsDownload: only admins download a backup, as a tar of its
// encrypted objects; every attempt, granted or refused, is audited with
// who, what and when.
func TestBackupsDownload(t *testing.T) {
	ts, _, audit := startBackups(t)
	const id = "20261205T080000Z-1a2b3c4d"
	path := "/api/v1/tenants/alpha/backups/" + id + "/download"
	resp := ts.doResp(t, req{method: "GET", path: path, token: "admin"})
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download: %d %v %s", resp.StatusCode, err, b)
	}
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/x-tar" || cd != `attachment; filename="alpha-`+id+`.tar"` {
		t.Errorf("Content-Type %q, Content-Disposition %q", ct, cd)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q", cc)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the download is not a tar: %v", err)
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "alpha/"+id+"/manifest.age,alpha/"+id+"/snapshot.age,alpha/"+id+"/state.age" {
		t.Errorf("tar holds %s", got)
	}

	if code, body := ts.do(t, req{method: "HEAD", path: path, token: "admin"}); code != http.StatusOK || len(body) != 0 {
		t.Errorf("HEAD: %d with %d bytes", code, len(body))
	}
	for _, r := range []struct {
		req  req
		code int
	}{
		{req{method: "GET", path: path, token: "editor"}, http.StatusForbidden},
		{req{method: "GET", path: path, token: "viewer"}, http.StatusForbidden},
		{req{method: "GET", path: path, bearer: "not-a-token"}, http.StatusUnauthorized},
		{req{method: "GET", path: "/api/v1/tenants/alpha/backups/20261205T090000Z-00000000/download", token: "admin"}, http.StatusNotFound},
		{req{method: "GET", path: "/api/v1/tenants/alpha/backups/..%2F..%2Fstate/download", token: "admin"}, http.StatusBadRequest},
	} {
		code, body := ts.do(t, r.req)
		wantCode(t, r.req.path+" as "+r.req.token, code, body, r.code)
	}
	log := audit.String()
	for _, want := range []string{
		`msg=download who=admin source=token role=admin what=backup tenant=alpha backup=` + id,
		`msg="download refused" who=editor source=token role=edit what=backup tenant=alpha backup=` + id,
		`msg="download refused" who=viewer source=token role=view`,
		`msg="download refused" who=(unauthenticated) what=backup tenant=alpha backup=` + id,
		`msg="download failed" who=admin source=token role=admin what=backup tenant=alpha backup=20261205T090000Z-00000000`,
		`reason="backup ID"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %q:\n%s", want, log)
		}
	}
	if !strings.Contains(log, fmt.Sprintf("bytes=%d", len(b))) {
		t.Errorf("audit log does not record the download's size (%d bytes):\n%s", len(b), log)
	}
}

// TestBackupsDownloadBrokenOff: a download that fails after its first
// bytes is broken off, so that the client cannot take it for a whole
// backup; the audit log and the request log record it.
func TestBackupsDownloadBrokenOff(t *testing.T) {
	ts, _, audit := startBackups(t)
	resp := ts.doResp(t, req{method: "GET", path: "/api/v1/tenants/broken/backups/20261205T080000Z-1a2b3c4d/download", token: "admin"})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read %d bytes of a broken download without an error", len(b))
	}
	if !strings.Contains(audit.String(), `msg="download failed"`) || !strings.Contains(audit.String(), "connection reset") {
		t.Errorf("audit log:\n%s", audit)
	}
	if !strings.Contains(ts.logs.String(), "aborted=true") {
		t.Errorf("the request log does not record the broken-off answer:\n%s", ts.logs.String())
	}
}
