package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// reconcileCalls is the leader's answer to reconcile requests in the test
// below: it records the tenants asked for.
type reconcileCalls struct {
	mu      sync.Mutex
	tenants []string
}

func (c *reconcileCalls) RequestReconcile(tenant string) api.ReconcileResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tenants = append(c.tenants, tenant)
	return api.ReconcileResponse{Tenants: []api.ReconcileTenant{{Tenant: tenant, Action: api.ReconcileQueued}}}
}

func (c *reconcileCalls) asked() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.tenants...)
}

// TestFollowerTellsTheLeaderOfAMachineInMaintenance: a replica that does
// not lead, whose observer sees a machine waiting in maintenance mode,
// asks the leader through its API to run the tenant now, with a
// credential the replicas share (the leader has a tokens file); and a
// replica with no leader to ask says so.
func TestFollowerTellsTheLeaderOfAMachineInMaintenance(t *testing.T) {
	c := etcdtest.Start(t, 1)
	file, _ := servertest.Tokens(t, map[string]string{"ops": "admin"})
	var leaderHandler http.Handler
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { leaderHandler.ServeHTTP(w, r) }))
	defer front.Close()
	a := openReplicaMain(t, c, "a", "--tokens-file", file, "--advertise-url", front.URL)
	calls := &reconcileCalls{}
	a.Server.ServeReconcile(calls)
	leaderHandler = a.Server.Handler()
	err := a.Server.Store().Update(func(tx store.Tx) error {
		_, err := tx.PutObject(schema.KindTenant, "acme", &schema.Tenant{APIVersion: schema.APIVersion, Kind: schema.KindTenant,
			Metadata: schema.ObjectMeta{Name: "acme"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = a.replica.Run(ctx) })
	waitTrue(t, "a leads", func() bool { _, ok := a.replica.Leader(); return ok })

	b := openReplicaMain(t, c, "b", "--tokens-file", file)
	wg.Go(func() { _ = b.replica.Run(ctx) })
	waitTrue(t, "b sees a lead", func() bool { _, ok := leaderURL(b.replica); return ok })
	if err := b.askLeaderToReconcile("acme"); err != nil {
		t.Fatalf("b asks the leader: %v", err)
	}
	if got := calls.asked(); len(got) != 1 || got[0] != "acme" {
		t.Fatalf("the leader was asked for %v, want [acme]", got)
	}
	if err := a.askLeaderToReconcile("acme"); err == nil {
		t.Fatal("the leader asked itself through its API")
	}
}

// waitTrue waits up to 10 s for cond, and fails naming what.
func waitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
