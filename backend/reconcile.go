package backend

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
)

// maxReconcileBody bounds the body of POST /api/v1/reconcile: a tenant
// name in JSON needs far less.
const maxReconcileBody = 4 << 10

// Reconcile sets a reconcile in motion on request: a fetch of the source
// and, for tenant (every tenant when ""), the pending retry now instead of
// at its backoff. It changes no desired state. The reconciler implements
// it; the tenant exists (the handler checks).
type Reconcile interface {
	RequestReconcile(tenant string) api.ReconcileResponse
}

// ServeReconcile mounts POST /api/v1/reconcile (role edit). The body is
// empty or an api.ReconcileRequest; an unknown tenant answers 404. The
// answer is 202 with an api.ReconcileResponse. Call it before Run.
func (s *Server) ServeReconcile(rc Reconcile) {
	s.Handle("POST /api/v1/reconcile", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := requireRole(w, r, RoleEdit, "requesting a reconcile")
		if !ok {
			return
		}
		req, err := parseReconcileRequest(w, r)
		if err != nil {
			api.WriteError(w, err)
			return
		}
		if req.Tenant != "" {
			if err := s.store.View(func(tx store.Tx) error { return needTenant(tx, req.Tenant) }); err != nil {
				api.WriteError(w, err)
				return
			}
		}
		res := rc.RequestReconcile(req.Tenant)
		s.Audit().Info("reconcile requested", append(id.Who(), "role", id.Role.String(), "what", "reconcile", "tenant", req.Tenant, "tenants", len(res.Tenants), "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)...)
		api.WriteJSON(w, http.StatusAccepted, res)
	}))
}

// parseReconcileRequest reads the body strictly: empty, or one JSON
// object with only known fields, under maxReconcileBody.
func parseReconcileRequest(w http.ResponseWriter, r *http.Request) (api.ReconcileRequest, error) {
	var req api.ReconcileRequest
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReconcileBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return req, api.Errorf(http.StatusRequestEntityTooLarge, "reconcile request over %d bytes", maxReconcileBody)
	}
	if err != nil {
		return req, api.Errorf(http.StatusBadRequest, "reconcile request: %v", err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return req, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, api.Errorf(http.StatusBadRequest, "reconcile request: %v; want {\"tenant\": NAME} or no body", err)
	}
	if dec.More() {
		return req, api.Errorf(http.StatusBadRequest, "reconcile request: one JSON object expected, more follows")
	}
	return req, nil
}
