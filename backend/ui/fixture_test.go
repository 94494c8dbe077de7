package ui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// testNow is the clock of the fixtures and of the pages under test.
var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// rig is a real server (store in a temp dir) with the dashboard mounted,
// driven through its handler.
type rig struct {
	t      testing.TB
	srv    *backend.Server
	h      http.Handler
	ui     *handler
	tokens string // the tokens file, if any
}

// rigOptions change newRig.
type rigOptions struct {
	tokens  map[string]backend.Role // name -> role; secrets are "secret-NAME"
	ui      Options
	secrets bool // mount tenant secrets downloads
	// clock is the clock of sessions and login limits; default time.Now.
	clock func() time.Time
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	dir := t.TempDir()
	cfg := backend.Config{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0", SessionClock: o.clock}
	if len(o.tokens) > 0 {
		cfg.TokensFile = filepath.Join(dir, "tokens")
		writeTokens(t, cfg.TokensFile, o.tokens)
	}
	srv, err := backend.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if o.secrets {
		srv.ServeTenantSecrets(fakeSecrets{}, nil)
	}
	if o.ui.Now == nil {
		o.ui.Now = func() time.Time { return testNow }
	}
	ui, err := New(srv, o.ui)
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleBrowser("/", ui)
	return &rig{t: t, srv: srv, h: srv.Handler(), ui: ui.(*handler), tokens: cfg.TokensFile}
}

// writeTokens writes a tokens file whose token NAME has the secret
// "secret-NAME".
func writeTokens(t testing.TB, path string, tokens map[string]backend.Role) {
	t.Helper()
	var b strings.Builder
	for name, role := range tokens {
		sum := sha256.Sum256([]byte("secret-" + name))
		fmt.Fprintf(&b, "%s %s %s\n", name, role, hex.EncodeToString(sum[:]))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeSecrets answers the downloads with their names; the handlers in
// front of them, which these tests check, are the server's own.
type fakeSecrets struct{}

func (fakeSecrets) Kubeconfig(_ context.Context, tenant string) ([]byte, error) {
	return []byte("kubeconfig of " + tenant), nil
}

func (fakeSecrets) Talosconfig(_ context.Context, tenant string) ([]byte, error) {
	return []byte("talosconfig of " + tenant), nil
}

func (fakeSecrets) MachineConfig(_ context.Context, tenant, machine string) ([]byte, error) {
	return []byte("config of " + tenant + "/" + machine), nil
}

// do sends a request to the rig's handler and returns the response.
func (r *rig) do(method, target string, header http.Header, body string) *http.Response {
	r.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:5555"
	for k, v := range header {
		req.Header[k] = v
	}
	if body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, req)
	return rec.Result()
}

// put stores objects, failing the test on an error.
func (r *rig) put(objs ...schema.Object) {
	r.t.Helper()
	err := r.srv.Store().Update(func(tx store.Tx) error {
		for _, o := range objs {
			if err := putOne(tx, o); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func putOne(tx store.Tx, o schema.Object) error {
	var kind, key string
	m := o.Meta()
	switch o := o.(type) {
	case *schema.Tenant:
		o.APIVersion, o.Kind = schema.APIVersion, schema.KindTenant
		kind, key = schema.KindTenant, m.Name
	case *schema.NodeGroup:
		o.APIVersion, o.Kind = schema.APIVersion, schema.KindNodeGroup
		kind, key = schema.KindNodeGroup, o.Tenant()+"/"+m.Name
	case *schema.ConfigPatch:
		o.APIVersion, o.Kind = schema.APIVersion, schema.KindConfigPatch
		kind, key = schema.KindConfigPatch, o.Tenant()+"/"+m.Name
	case *schema.Machine:
		o.APIVersion, o.Kind = schema.APIVersion, schema.KindMachine
		kind, key = schema.KindMachine, m.Name
	case *schema.Commit:
		o.APIVersion, o.Kind = schema.APIVersion, schema.KindCommit
		kind, key = schema.KindCommit, m.Name
		totals := o.Status.Sum() // as the reconciler writes every commit
		o.Status.Totals = &totals
	default:
		return fmt.Errorf("put %T: not a fixture kind", o)
	}
	_, err := tx.PutObject(kind, key, o)
	return err
}

// fleet returns a tenant with its node groups (cp control planes and
// workers workers), their machines, a config patch, in the given phase.
func fleet(name string, cp, workers int) []schema.Object {
	t := &schema.Tenant{
		Metadata: schema.ObjectMeta{Name: name, CreatedAt: testNow.Add(-time.Hour)},
		Spec: schema.TenantSpec{KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", ControlPlaneEndpoint: "https://" + name + ".example.internal:6443",
			ConfigPatches: []schema.NamedPatch{{Name: "cluster-name", Patch: "cluster:\n  clusterName: " + name + "\n"}}},
		Status: schema.TenantStatus{Phase: schema.TenantActive, Available: true, Ready: true, ControlPlaneReady: true,
			Machines: schema.MachineCounts{Desired: cp + workers, Total: cp + workers, Ready: cp + workers, ControlPlane: cp, ControlPlaneReady: cp, Workers: workers}},
	}
	objs := []schema.Object{t}
	for _, g := range []struct {
		name, role string
		n          int
	}{{"controlplane", schema.RoleControlPlane, cp}, {"workers", schema.RoleWorker, workers}} {
		objs = append(objs, &schema.NodeGroup{
			Metadata: schema.ObjectMeta{Name: g.name, Labels: map[string]string{schema.LabelTenant: name, schema.LabelRole: g.role}},
			Spec:     schema.NodeGroupSpec{Count: g.n, ProviderClass: schema.ProviderSim, ProviderConfig: map[string]any{"shape": "medium"}},
			Status:   schema.NodeGroupStatus{Machines: schema.MachineCounts{Desired: g.n, Total: g.n, Ready: g.n}},
		})
		for i := range g.n {
			id := fmt.Sprintf("%s-%s-%d", name, g.name, i)
			objs = append(objs, &schema.Machine{
				Metadata: schema.ObjectMeta{Name: id, Labels: map[string]string{schema.LabelTenant: name, schema.LabelRole: g.role, schema.LabelNodeGroup: g.name}},
				Spec: schema.MachineSpec{ManagementAddress: fmt.Sprintf("127.0.%d.%d", len(name)%200, i+1), ProviderID: id, ProviderClass: schema.ProviderSim,
					Hostname: id, Role: g.role, Tenant: name, NodeGroup: g.name},
				Status: schema.MachineStatus{Stage: schema.StageReady, Ready: true, TalosVersion: "1.12.6", KubernetesVersion: "1.34.1"},
			})
		}
	}
	objs = append(objs, &schema.ConfigPatch{
		Metadata: schema.ObjectMeta{Name: "ntp", Labels: map[string]string{schema.LabelTenant: name}},
		Spec:     schema.ConfigPatchSpec{TargetRole: schema.RoleControlPlane, Patch: "machine:\n  time:\n    servers: [time.example.internal]\n"},
		Status:   schema.ConfigPatchStatus{Machines: cp},
	})
	return objs
}

// commit returns a Commit of sha, created at, with a result per tenant.
func commit(sha, message string, at time.Time, phase schema.CommitPhase, results ...schema.TenantResult) *schema.Commit {
	return &schema.Commit{
		Metadata: schema.ObjectMeta{Name: schema.CommitName(sha), CreatedAt: at},
		Spec:     schema.CommitSpec{SHA: sha, Ref: "refs/heads/main", Author: "Ada <ada@example.internal>", Message: message},
		Status: schema.CommitStatus{Phase: phase, Tenants: results,
			Timings: schema.Timings{ReceivedAt: at, ValidatedAt: at.Add(time.Second), FinishedAt: at.Add(9 * time.Second)}},
	}
}

// sha returns a fake 40-hex revision that starts with n in two digits.
func sha(n int) string { return fmt.Sprintf("%02x", n) + strings.Repeat("c", 38) }
