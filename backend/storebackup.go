package backend

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
)

// StoreBackupPath is the admin-only download of a consistent copy of the
// server's whole store, which `rezuscloud store backup` takes.
const StoreBackupPath = "/api/v1/admin/store"

// serveStoreBackup mounts at pattern (the server's routes: "GET "
// + StoreBackupPath)
//
//	GET /api/v1/admin/store   (role admin): a copy of the store file
//
// The copy is consistent, as of one commit, and holds the TF states as
// the store keeps them (encrypted when tofu encrypts them). Every
// download, granted, refused or failed, is written to the audit log (see
// SetAudit). A copy that fails once its first bytes are sent ends the
// connection, so that the client never takes a part for the whole.
func (s *Server) serveStoreBackup(pattern string, b store.Backuper) {
	const what = "store backup"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := IdentityFrom(r.Context())
		audit := s.audit()
		attrs := append(id.Who(), "role", id.Role.String(), "what", what, "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)
		if _, ok := requireRole(w, r, RoleAdmin, "downloading a copy of the store"); !ok {
			audit.Warn("download refused", append(attrs, "reason", "role")...)
			return
		}
		audit.Info("download", attrs...)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="rezuscloud.db"`)
		w.Header().Set("Cache-Control", "no-store")
		n, err := b.WriteBackup(w)
		if err != nil {
			audit.Warn("download failed", append(attrs, "bytes", n, "err", err.Error())...)
			s.log.Error("store backup", "bytes", n, "err", err)
			if n > 0 {
				panic(http.ErrAbortHandler)
			}
			api.WriteError(w, api.Errorf(http.StatusInternalServerError, "the copy of the store could not be made; the server log has the details"))
			return
		}
		audit.Info("download ended", append(attrs, "bytes", n)...)
	})
	s.handleAudited(pattern, h, func(r *http.Request) {
		s.refused.warn(s.audit(), "download refused", clientKey(r.RemoteAddr), what, "who", "(unauthenticated)", "what", what,
			"at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr, "reason", "credentials")
	})
}

// audit is the audit log SetAudit set, else the server's log.
func (s *Server) audit() *slog.Logger {
	if a := s.state.opts.Audit; a != nil {
		return a
	}
	return s.log
}

// refuseStoreBackup mounts at pattern, for a store that makes no copy of
// itself (store.Backuper), such as the etcd engine's, an answer that says
// how to back that store up instead.
func (s *Server) refuseStoreBackup(pattern string) {
	s.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := requireRole(w, r, RoleAdmin, "downloading a copy of the store"); !ok {
			return
		}
		api.WriteError(w, api.Errorf(http.StatusNotImplemented, "this server keeps its store in etcd, which it does not copy into one file: back up etcd with its own snapshot (etcdctl snapshot save FILE) instead"))
	}))
}
