package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Backups are the backups of tenants' etcd, in the backup store the server
// is configured with. The reconciler implements it. Errors that wrap
// store.ErrNotFound answer 404 and an *api.Error its own code; the
// messages of both reach the client, so they must not hold secrets. Any
// other error answers 500 and goes to the server's log.
type Backups interface {
	// ListBackups returns the tenant's complete backups, oldest first:
	// their metadata only.
	ListBackups(ctx context.Context, tenant string) ([]schema.BackupInfo, error)
	// RequestBackup queues a backup of the tenant now, off the apply
	// path; by names who asked. It changes nothing of the cluster.
	RequestBackup(ctx context.Context, tenant, by string) error
	// DownloadBackup writes the backup's objects, as stored (encrypted),
	// as a tar stream to w.
	DownloadBackup(ctx context.Context, tenant, id string, w io.Writer) error
}

// maxBackupRequestBody bounds the body of a backup request, which is
// empty or {}.
const maxBackupRequestBody = 4 << 10

// noBackupStore is the answer of every backup endpoint of a server
// without a backup store.
const noBackupStore = "no backup store is configured: the server takes no backups (see its --backup-store flag)"

// ServeBackups makes the backup endpoints of the API answer from b:
//
//	GET  /api/v1/tenants/{name}/backups                (role view): {"items": [schema.BackupInfo…], "total": N}
//	POST /api/v1/tenants/{name}/backups                (role edit): 202 api.BackupResponse; the body is empty or {}
//	GET  /api/v1/tenants/{name}/backups/{id}/download  (role admin): the backup's encrypted objects, application/x-tar
//
// They are mounted with the server's routes; without a call of ServeBackups
// (or with a nil b) they answer 503: no backup store is configured. A
// tenant the store does not know answers 404. Every download, granted,
// refused or failed, is written to audit (the server's logger when nil)
// with who, what and when. Call it before Run.
func (s *Server) ServeBackups(b Backups, audit *slog.Logger) {
	if audit == nil {
		audit = s.log
	}
	if b == nil {
		s.backups.Store(nil)
		return
	}
	s.backups.Store(&backupService{b: b, audit: audit})
}

// backupService is what ServeBackups was given.
type backupService struct {
	b     Backups
	audit *slog.Logger
}

// Backups returns what ServeBackups was given: nil when the server has no
// backup store. The dashboard lists a tenant's backups through it.
func (s *Server) Backups() Backups {
	if bs := s.backups.Load(); bs != nil {
		return bs.b
	}
	return nil
}

// serveBackups mounts the backup endpoints (see ServeBackups).
func (s *Server) serveBackups() {
	s.Handle("GET /api/v1/tenants/{name}/backups", http.HandlerFunc(s.listBackups))
	s.Handle("POST /api/v1/tenants/{name}/backups", http.HandlerFunc(s.requestBackup))
	download := s.authenticate(http.HandlerFunc(s.downloadBackup))
	// Past the server's authentication, so that attempts without valid
	// credentials reach the audit log too.
	s.HandleUnauthenticated("GET /api/v1/tenants/{name}/backups/{id}/download", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w}
		download.ServeHTTP(rec, r)
		if rec.status == http.StatusUnauthorized {
			s.refused.warn(s.auditLog(), "download refused", clientKey(r.RemoteAddr), "credentials", "who", "(unauthenticated)", "what", "backup", "tenant", r.PathValue("name"), "backup", r.PathValue("id"),
				"at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr, "reason", "credentials")
		}
	}))
}

// auditLog is where backup downloads are recorded.
func (s *Server) auditLog() *slog.Logger {
	if bs := s.backups.Load(); bs != nil {
		return bs.audit
	}
	return s.log
}

// backupTenant checks what every backup endpoint checks, in this order:
// the caller's role, a backup store, the tenant. It answers the request
// itself when one fails; a replica that does not lead, and so has no
// backup store of its own, sends it to the leader.
func (s *Server) backupTenant(w http.ResponseWriter, r *http.Request, role Role, what string) (backupCall, bool) {
	id, ok := requireRole(w, r, role, what)
	if !ok {
		return backupCall{}, false
	}
	b := s.Backups()
	if b == nil && s.api.forwarded(w, r) {
		return backupCall{}, false // a replica that does not lead: the leader answers
	}
	if b == nil {
		api.WriteError(w, api.Errorf(http.StatusServiceUnavailable, "%s", noBackupStore))
		return backupCall{}, false
	}
	tenant := r.PathValue("name")
	if err := s.store.View(func(tx store.Tx) error { return needTenant(tx, tenant) }); err != nil {
		api.WriteError(w, err)
		return backupCall{}, false
	}
	return backupCall{b: b, who: id, tenant: tenant}, true
}

// backupCall is a backup request that passed backupTenant's checks.
type backupCall struct {
	b      Backups
	who    Identity
	tenant string
}

// backupError answers err of the Backups: 404 for store.ErrNotFound, an
// *api.Error as it is, anything else 500 with the details in the log.
func (s *Server) backupError(w http.ResponseWriter, err error, what, tenant string) {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		api.WriteError(w, ae)
	case errors.Is(err, store.ErrNotFound):
		api.WriteError(w, api.Errorf(http.StatusNotFound, "%v", err))
	default:
		s.log.Error(what, "tenant", tenant, "err", err)
		api.WriteError(w, api.Errorf(http.StatusInternalServerError, "%s of tenant %s failed; the server log has the details", what, tenant))
	}
}

func (s *Server) listBackups(w http.ResponseWriter, r *http.Request) {
	c, ok := s.backupTenant(w, r, RoleView, "listing backups")
	if !ok {
		return
	}
	list, err := c.b.ListBackups(r.Context(), c.tenant)
	if err != nil {
		s.backupError(w, err, "listing the backups", c.tenant)
		return
	}
	api.WriteJSON(w, http.StatusOK, api.NewList(list))
}

func (s *Server) requestBackup(w http.ResponseWriter, r *http.Request) {
	c, ok := s.backupTenant(w, r, RoleEdit, "requesting a backup")
	if !ok {
		return
	}
	if err := emptyObjectBody(w, r, "backup request"); err != nil {
		api.WriteError(w, err)
		return
	}
	if err := c.b.RequestBackup(r.Context(), c.tenant, c.who.Name); err != nil {
		s.backupError(w, err, "requesting a backup", c.tenant)
		return
	}
	s.auditLog().Info("backup requested", append(c.who.Who(), "role", c.who.Role.String(), "what", "backup request", "tenant", c.tenant, "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)...)
	api.WriteJSON(w, http.StatusAccepted, api.BackupResponse{Accepted: true,
		Message: fmt.Sprintf("a backup of tenant %s is queued; its status.backup and the list of its backups show it when it is written", c.tenant)})
}

// emptyObjectBody reads a body that must be empty or the JSON object {},
// under maxBackupRequestBody.
func emptyObjectBody(w http.ResponseWriter, r *http.Request, what string) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBackupRequestBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return api.Errorf(http.StatusRequestEntityTooLarge, "%s over %d bytes", what, maxBackupRequestBody)
	}
	if err != nil {
		return api.Errorf(http.StatusBadRequest, "%s: %v", what, err)
	}
	if body := strings.Join(strings.Fields(string(b)), ""); body != "" && body != "{}" {
		return api.Errorf(http.StatusBadRequest, "%s: want no body or {}, not %q", what, string(b))
	}
	return nil
}

func (s *Server) downloadBackup(w http.ResponseWriter, r *http.Request) {
	tenant, backup := r.PathValue("name"), r.PathValue("id")
	who, _ := IdentityFrom(r.Context())
	audit := s.auditLog()
	attrs := append(who.Who(), "role", who.Role.String(), "what", "backup", "tenant", tenant, "backup", backup,
		"at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)
	rec := &statusWriter{ResponseWriter: w}
	c, ok := s.backupTenant(rec, r, RoleAdmin, "downloading a backup")
	if !ok {
		audit.Warn("download refused", append(attrs, "reason", http.StatusText(rec.status))...)
		return
	}
	if err := schema.CheckBackupID(backup); err != nil {
		audit.Warn("download refused", append(attrs, "reason", "backup ID")...)
		api.WriteError(w, api.Errorf(http.StatusBadRequest, "%v", err))
		return
	}
	tw := &tarWriter{w: rec, name: tenant + "-" + backup + ".tar"}
	if r.Method == http.MethodHead {
		// The headers only: reading the backup would be for nothing.
		tw.start()
		return
	}
	err := c.b.DownloadBackup(r.Context(), tenant, backup, tw)
	switch {
	case err == nil && !tw.started:
		tw.start()
	case err != nil && !tw.started:
		audit.Warn("download failed", append(attrs, "err", err.Error())...)
		s.backupError(w, err, "downloading a backup", tenant)
		return
	case err != nil:
		// The answer has begun: only breaking it off tells the client
		// that what it got is not the whole backup.
		audit.Warn("download failed", append(attrs, "bytes", rec.bytes, "err", err.Error())...)
		panic(http.ErrAbortHandler)
	}
	audit.Info("download", append(attrs, "bytes", rec.bytes)...)
}

// tarWriter writes a backup's tar stream, with its headers sent before
// the first byte, so that an error before it still gets an error answer.
type tarWriter struct {
	w       http.ResponseWriter
	name    string
	started bool
}

func (t *tarWriter) start() {
	t.started = true
	h := t.w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Disposition", `attachment; filename="`+t.name+`"`)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	t.w.WriteHeader(http.StatusOK)
	// The client learns at once that the download began.
	http.NewResponseController(t.w).Flush()
}

func (t *tarWriter) Write(p []byte) (int, error) {
	if !t.started {
		t.start()
	}
	return t.w.Write(p)
}
