package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/store"
)

// secrets serves one tenant's downloads; any other tenant is not found,
// and tenant "failing" fails with an error that names a path.
type secrets struct{}

const secretsFailure = "read /var/lib/rezuscloud/work/failing/secrets.json: permission denied"

func (secrets) answer(tenant, what string) ([]byte, error) {
	switch tenant {
	case "alpha":
		return []byte(what + " of alpha\n"), nil
	case "failing":
		return nil, errors.New(secretsFailure)
	}
	return nil, fmt.Errorf("tenant %s: %w", tenant, store.ErrNotFound)
}

func (s secrets) Kubeconfig(_ context.Context, tenant string) ([]byte, error) {
	return s.answer(tenant, "kubeconfig")
}

func (s secrets) Talosconfig(_ context.Context, tenant string) ([]byte, error) {
	return s.answer(tenant, "talosconfig")
}

func (s secrets) MachineConfig(_ context.Context, tenant, machine string) ([]byte, error) {
	return s.answer(tenant, "config of "+machine)
}

func (s secrets) Preview(context.Context, preview.Request) (*preview.Result, error) {
	return &preview.Result{}, nil
}

func (s secrets) RenderedWorkspace(_ context.Context, tenant string) ([]byte, error) {
	return s.answer(tenant, "workspace")
}

// TestSubresourceErrors: a download that fails answers a 500 that does
// not repeat the error, which goes to the log instead; one of a tenant
// that does not exist answers 404.
func TestSubresourceErrors(t *testing.T) {
	ts := startServer(t, Config{}, true)
	ts.ServeTenantSecrets(secrets{}, nil)
	ts.ServePreviews(secrets{})

	code, body := ts.do(t, req{method: "GET", path: "/api/v1/tenants/alpha/kubeconfig", token: "admin"})
	if code != http.StatusOK || string(body) != "kubeconfig of alpha\n" {
		t.Fatalf("kubeconfig of alpha: %d %s", code, body)
	}
	for _, path := range []string{
		"/api/v1/tenants/failing/kubeconfig",
		"/api/v1/tenants/failing/talosconfig",
		"/api/v1/tenants/failing/machines/sim-1/config",
		"/api/v1/tenants/failing/rendered",
	} {
		code, body := ts.do(t, req{method: "GET", path: path, token: "admin"})
		wantCode(t, path, code, body, http.StatusInternalServerError)
		wantAPIError(t, body, http.StatusInternalServerError, api.ReasonInternalError, "server log")
		if strings.Contains(string(body), "/var/lib") || strings.Contains(string(body), "permission") {
			t.Errorf("%s: the answer repeats the error: %s", path, body)
		}
	}
	if n := strings.Count(ts.logs.String(), "permission denied"); n < 4 {
		t.Errorf("the log has the error %d times, want once per failed download:\n%s", n, ts.logs.String())
	}
	code, body = ts.do(t, req{method: "GET", path: "/api/v1/tenants/gamma/talosconfig", token: "admin"})
	wantCode(t, "talosconfig of gamma", code, body, http.StatusNotFound)
	wantAPIError(t, body, http.StatusNotFound, api.ReasonNotFound, "gamma")
}
