package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
)

// replicasOf is a backend.ReplicaSource that reports a fixed status.
type replicasOf struct{ st *api.ReplicasStatus }

func (r replicasOf) ReplicasStatus() *api.ReplicasStatus { return r.st }

// TestStatusReplicas: status against a server that runs as a replica
// prints the replicas (name, leader, shards, tenants, joined), and -o json
// carries them; against a server that runs alone it prints none.
func TestStatusReplicas(t *testing.T) {
	isolate(t)
	srv := servertest.StartBackend(t, backend.Config{}, nil)
	t.Setenv(envServer, srv.URL())
	code, out, errOut := runCLI(t, "status")
	if code != 0 || strings.Contains(out, "Replicas") {
		t.Fatalf("status of a server that runs alone: exit %d, want 0 and no replicas:\n%s%s", code, out, errOut)
	}

	joined := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	srv.SetReplicas(replicasOf{&api.ReplicasStatus{Self: "rc-b", Leader: "rc-a", Shards: 64, Unowned: 2, Members: []api.ReplicaStatus{
		{Name: "rc-a", Address: "https://rc-a.example:8443", Since: joined, Leader: true, Shards: 31, Tenants: 120},
		{Name: "rc-b", Since: joined, Shards: 31, Tenants: 7},
	}}})
	code, out, errOut = runCLI(t, "status")
	if code != 0 {
		t.Fatalf("status: exit %d:\n%s%s", code, out, errOut)
	}
	since := joined.Format(time.RFC3339) + " (3h ago)"
	contains(t, out, "Replicas:  2 live, 64 shards, leader rc-a, 2 shards unowned\n"+
		"  NAME                LEADER  SHARDS  TENANTS  JOINED\n"+
		"  rc-a                yes     31      120      "+since+"\n"+
		"  rc-b (this server)  -       31      7        "+since+"\n")

	code, out, errOut = runCLI(t, "status", "-o", "json")
	var rep struct {
		Status api.Status `json:"status"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Status.Replicas == nil || len(rep.Status.Replicas.Members) != 2 || rep.Status.Replicas.Leader != "rc-a" {
		t.Errorf("status -o json: exit %d, replicas %+v:\n%s%s", code, rep.Status.Replicas, out, errOut)
	}
}

// contains fails unless s holds want.
func contains(t *testing.T, s, want string) {
	t.Helper()
	if !strings.Contains(s, want) {
		t.Errorf("no\n%s\nin:\n%s", want, s)
	}
}
