package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/reconciler"
)

// A tenant's runs happen on the replica that owns it. The leader's
// reconciler hands each run of a tenant that another replica owns to that
// replica through its API (replicaOwners.Run), and that replica's
// reconciler runs it (serveRuns); see reconciler/remote.go.

// runsPath is where a replica takes the runs of the tenants it owns.
const runsPath = "/api/v1/replica/runs"

// maxRunBody bounds the body of a handed-over run: one tenant's manifests.
const maxRunBody = 16 << 20

// replicaOwners are the reconciler's Owners on a replica.
type replicaOwners struct{ m *Main }

var _ reconciler.Spreader = replicaOwners{}

// owners returns the reconciler's Owners: nil on a server alone.
func (m *Main) owners() reconciler.Owners {
	if m.replica == nil {
		return nil
	}
	return replicaOwners{m: m}
}

func (o replicaOwners) Acquire(tenant string) (context.Context, func(), bool) {
	return o.m.replica.Acquire(tenant)
}

func (o replicaOwners) Owns(tenant string) bool { return o.m.replica.Owns(tenant) }

func (o replicaOwners) Changed() <-chan struct{} { return o.m.replica.Changed() }

// Spread weighs the shards by the tenants in them (replica.Spread).
func (o replicaOwners) Spread(ctx context.Context, tenants []string) (bool, error) {
	return o.m.replica.Spread(ctx, tenants)
}

// Run sends the run to the replica that holds the tenant's shard and
// waits for its result. The request ends early when another replica
// comes to hold the shard (the owner died, or was paused past its lease),
// so that the leader sends the run to that one.
func (o replicaOwners) Run(ctx context.Context, req reconciler.RemoteRun) (reconciler.RemoteResult, error) {
	var out reconciler.RemoteResult
	r := o.m.replica
	name, addr, ok := r.Holder(req.Tenant)
	if !ok {
		return out, fmt.Errorf("no live replica holds the shard of tenant %s", req.Tenant)
	}
	if name == r.Status(nil).Self {
		return out, fmt.Errorf("this replica holds the shard of tenant %s, but hands it over", req.Tenant)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			changed := r.Changed()
			if now, _, _ := r.Holder(req.Tenant); now != name {
				cancel()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	body, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(addr, "/")+runsPath, bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if tokens := o.m.Server.Tokens(); tokens != nil {
		secret, revoke := tokens.Ephemeral("replica-"+r.Status(nil).Self, backend.RoleAdmin)
		defer revoke()
		hreq.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return out, fmt.Errorf("replica %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return out, fmt.Errorf("replica %s answered %s: %s", name, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("replica %s: the result of the run does not read: %w", name, err)
	}
	return out, nil
}

// serveRuns takes the runs that the leader hands to this replica: for
// admins, which the replicas' own credentials are, since a run applies
// the manifests it carries. Until this replica leads, its status tells
// the tofu processes its runs started.
func (p *reconcilerPart) serveRuns() error {
	rec := p.rec
	p.m.Server.SetStatus(func(st *api.Status) {
		rs := rec.Status()
		st.Reconciler = &rs
	})
	p.m.Server.Handle("POST "+runsPath, backend.RequireRole(backend.RoleAdmin, "running a tenant's run handed over by the leader",
		http.HandlerFunc(p.takeRun)))
	return nil
}

func (p *reconcilerPart) takeRun(w http.ResponseWriter, r *http.Request) {
	var req reconciler.RemoteRun
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRunBody)).Decode(&req); err != nil {
		http.Error(w, "the run does not read: "+err.Error(), http.StatusBadRequest)
		return
	}
	res, err := p.rec.RunFor(r.Context(), req)
	switch {
	case errors.Is(err, reconciler.ErrNotOwner):
		http.Error(w, err.Error(), http.StatusConflict)
	case r.Context().Err() != nil:
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	}
}
