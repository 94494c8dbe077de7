package backend

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
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
			id, ok := IdentityFrom(r.Context())
			attrs := []any{"who", id.Name, "role", id.Role.String(), "what", what, "tenant", tenant, "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr}
			if machine != "" {
				attrs = append(attrs, "machine", machine)
			}
			if _, ok = requireRole(w, r, RoleAdmin, "downloading a "+what); !ok {
				audit.Warn("download refused", append(attrs, "reason", "role")...)
				return
			}
			b, err := get(r)
			if err != nil {
				audit.Warn("download failed", append(attrs, "err", err.Error())...)
				if errors.Is(err, ErrNotFound) {
					api.WriteError(w, api.Errorf(http.StatusNotFound, "%v", err))
					return
				}
				api.WriteError(w, api.Errorf(http.StatusInternalServerError, "%s of tenant %s: %v", what, tenant, err))
				return
			}
			audit.Info("download", attrs...)
			w.Header().Set("Content-Type", contentType)
			w.Header().Set("Cache-Control", "no-store")
			w.Write(b)
		})
	}
	s.Handle("GET /api/v1/tenants/{name}/kubeconfig", serve("kubeconfig", "application/yaml", func(r *http.Request) ([]byte, error) {
		return p.Kubeconfig(r.Context(), r.PathValue("name"))
	}))
	s.Handle("GET /api/v1/tenants/{name}/talosconfig", serve("talosconfig", "application/yaml", func(r *http.Request) ([]byte, error) {
		return p.Talosconfig(r.Context(), r.PathValue("name"))
	}))
	s.Handle("GET /api/v1/tenants/{name}/machines/{id}/config", serve("machine config", "application/yaml", func(r *http.Request) ([]byte, error) {
		return p.MachineConfig(r.Context(), r.PathValue("name"), r.PathValue("id"))
	}))
}
