package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestReplicaTakesRunsOfItsTenants: a replica takes a handed-over run
// from admins only (the replicas' own credentials are), refuses a body
// that does not read and a run of a tenant it does not own, and answers a
// run of one it owns with its result.
func TestReplicaTakesRunsOfItsTenants(t *testing.T) {
	c := etcdtest.Start(t, 1)
	file, tokens := servertest.Tokens(t, map[string]string{"ops": "admin", "viewer": "view"})
	a := openReplicaMain(t, c, "a", "--tokens-file", file, "--dir", t.TempDir(),
		"--tofu", testenv.Tofu(t), "--provider-mirror", testenv.ProviderMirror(t))
	h := a.Server.Handler()
	post := func(token string, body []byte) (int, string) {
		req := httptest.NewRequest(http.MethodPost, runsPath, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	// A destroy of a tenant never applied: nothing to run, no tofu.
	run, err := json.Marshal(reconciler.RemoteRun{Revision: "abc", Tenant: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := post(tokens["viewer"], run); code != http.StatusForbidden {
		t.Errorf("a run from a viewer: %d %s, want 403", code, body)
	}
	if code, body := post(tokens["ops"], []byte("{")); code != http.StatusBadRequest {
		t.Errorf("a run that does not read: %d %s, want 400", code, body)
	}
	if code, body := post(tokens["ops"], run); code != http.StatusConflict {
		t.Errorf("a run before the replica holds any shard: %d %s, want 409", code, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = a.replica.Run(ctx) })
	waitTrue(t, "a holds gone's shard", func() bool { return a.replica.Owns("gone") })
	code, body := post(tokens["ops"], run)
	var res reconciler.RemoteResult
	if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil || res.Result.Phase != schema.CommitSucceeded || res.Result.Tenant != "gone" {
		t.Fatalf("a run of a tenant a owns: %d %s, want its result, succeeded", code, body)
	}
}
