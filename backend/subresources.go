package backend

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/store"
)

// TenantSecrets produces the credentials and configs of a tenant that only
// admins may download. The reconciler implements it; errors that wrap
// ErrNotFound answer 404.
type TenantSecrets interface {
	// Kubeconfig returns an admin kubeconfig for the tenant's cluster.
	Kubeconfig(ctx context.Context, tenant string) ([]byte, error)
	// Talosconfig returns a talosconfig for the tenant's control plane.
	Talosconfig(ctx context.Context, tenant string) ([]byte, error)
	// MachineConfig returns the Talos machine config a machine boots with.
	MachineConfig(ctx context.Context, tenant, machine string) ([]byte, error)
}

// ServeTenantSecrets mounts the admin-only sub-resources
//
//	GET /api/v1/tenants/{name}/kubeconfig
//	GET /api/v1/tenants/{name}/talosconfig
//	GET /api/v1/tenants/{name}/machines/{id}/config
//
// Every download, granted or refused, is written to audit with who, what
// and when. Call it before Run.
func (s *Server) ServeTenantSecrets(p TenantSecrets, audit *slog.Logger) {
	if audit == nil {
		audit = s.log
	}
	serve := func(what, contentType string, get func(r *http.Request) ([]byte, error)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tenant, machine := r.PathValue("name"), r.PathValue("id")
			id, _ := IdentityFrom(r.Context())
			attrs := append(id.Who(), "role", id.Role.String(), "what", what, "tenant", tenant, "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)
			if machine != "" {
				attrs = append(attrs, "machine", machine)
			}
			if _, ok := requireRole(w, r, RoleAdmin, "downloading a "+what); !ok {
				audit.Warn("download refused", append(attrs, "reason", "role")...)
				return
			}
			b, err := get(r)
			if err != nil {
				audit.Warn("download failed", append(attrs, "err", err.Error())...)
				if errors.Is(err, store.ErrNotFound) {
					api.WriteError(w, api.Errorf(http.StatusNotFound, "%v", err))
					return
				}
				api.WriteError(w, api.Errorf(http.StatusInternalServerError, "%s of tenant %s could not be made; the server log has the details", what, tenant))
				return
			}
			audit.Info("download", attrs...)
			w.Header().Set("Content-Type", contentType)
			w.Header().Set("Cache-Control", "no-store")
			w.Write(b)
		})
	}
	mount := func(pattern, what string, get func(r *http.Request) ([]byte, error)) {
		s.handleAudited(pattern, serve(what, "application/yaml", get), func(r *http.Request) {
			attrs := []any{"who", "(unauthenticated)", "what", what, "tenant", r.PathValue("name"),
				"at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr, "reason", "credentials"}
			if id := r.PathValue("id"); id != "" {
				attrs = append(attrs, "machine", id)
			}
			audit.Warn("download refused", attrs...)
		})
	}
	mount("GET /api/v1/tenants/{name}/kubeconfig", "kubeconfig", func(r *http.Request) ([]byte, error) {
		return p.Kubeconfig(r.Context(), r.PathValue("name"))
	})
	mount("GET /api/v1/tenants/{name}/talosconfig", "talosconfig", func(r *http.Request) ([]byte, error) {
		return p.Talosconfig(r.Context(), r.PathValue("name"))
	})
	mount("GET /api/v1/tenants/{name}/machines/{id}/config", "machine config", func(r *http.Request) ([]byte, error) {
		return p.MachineConfig(r.Context(), r.PathValue("name"), r.PathValue("id"))
	})
}

// handleAudited mounts h at pattern behind authentication, as Handle
// does, and calls refused with each request that authentication turns
// away (401), so that attempts without valid credentials reach the audit
// log too.
func (s *Server) handleAudited(pattern string, h http.Handler, refused func(*http.Request)) {
	authed := s.authenticate(h)
	s.HandleUnauthenticated(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w}
		authed.ServeHTTP(rec, r)
		if rec.status == http.StatusUnauthorized {
			refused(r)
		}
	}))
}

// Previewer shows what a tree of manifests would do without applying it.
// The reconciler implements it.
type Previewer interface {
	Preview(ctx context.Context, req preview.Request) (*preview.Result, error)
	// RenderedWorkspace returns a tenant's applied main.tf.json with its
	// secrets redacted; errors wrapping ErrNotFound answer 404.
	RenderedWorkspace(ctx context.Context, tenant string) ([]byte, error)
}

// ServePreviews mounts
//
//	POST /api/v1/previews                  (role edit): preview.Request in, preview.Result out
//	GET  /api/v1/tenants/{name}/rendered   (role view): the applied workspace, redacted
//
// An upload over preview.MaxUploadBytes (plus room for its JSON) answers
// 413. Call it before Run.
func (s *Server) ServePreviews(p Previewer) {
	s.Handle("POST /api/v1/previews", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := requireRole(w, r, RoleEdit, "previewing manifests"); !ok {
			return
		}
		limit := int64(preview.MaxUploadBytes) * 2
		if r.ContentLength > limit {
			api.WriteError(w, api.Errorf(http.StatusRequestEntityTooLarge, "preview upload of %d bytes: the limit is %d", r.ContentLength, limit))
			return
		}
		var req preview.Request
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				api.WriteError(w, api.Errorf(http.StatusRequestEntityTooLarge, "preview upload over %d bytes", limit))
				return
			}
			var ae *api.Error
			if errors.As(err, &ae) {
				api.WriteError(w, ae)
				return
			}
			api.WriteError(w, api.Errorf(http.StatusBadRequest, "preview request: %v", err))
			return
		}
		res, err := p.Preview(r.Context(), req)
		if err != nil {
			api.WriteError(w, api.Errorf(http.StatusBadRequest, "%v", err))
			return
		}
		api.WriteJSON(w, http.StatusOK, res)
	}))
	s.Handle("GET /api/v1/tenants/{name}/rendered", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := requireRole(w, r, RoleView, "reading a rendered workspace"); !ok {
			return
		}
		b, err := p.RenderedWorkspace(r.Context(), r.PathValue("name"))
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				api.WriteError(w, api.Errorf(http.StatusNotFound, "%v", err))
				return
			}
			s.log.Error("rendered workspace", "tenant", r.PathValue("name"), "err", err)
			api.WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
}
