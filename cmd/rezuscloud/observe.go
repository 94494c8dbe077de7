package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/metrics"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// A replica observes the machines of the tenants its shards hold, and
// only those (replica.Owns): every replica, the leader too, runs an
// observer from the start, so that the connections, watches and probes of
// the fleet are spread across the replicas and move with the shards. The
// replica's reconciler runs those tenants' runs, and with them their
// rollouts (owners.go), through the same Talos plane; a rollout's progress
// reaches the observer of another replica, when the tenant moved, through
// the tenant's rollout record.

// openPlane builds the Talos plane that bootstraps, rolls and observes
// the tenants' machines through their Talos API.
func (m *Main) openPlane(now func() time.Time) (*talos.Plane, error) {
	tf := m.flags.talos
	pool := talos.NewPool(talos.PoolOptions{})
	m.onClose(pool.Close)
	log := m.log.With("component", "talos")
	prober := talos.NewProber(pool, talos.ProberOptions{TTL: tf.probeTTL, Concurrency: tf.probeConcurrency, Timeout: tf.probeTimeout, Log: log})
	return talos.New(talos.Options{
		Store: m.Server.Store(), Pool: pool, Prober: prober, Installer: tf.installer,
		Timeout: tf.timeout, Wait: tf.wait, Logger: log, Now: now,
		Gate: m.replicaGate(),
	})
}

// openObserver builds a replica's plane, which its reconciler uses too
// once it leads, and the reader of the tenants' secrets bundles.
func (m *Main) openObserver() (err error) {
	if m.replica == nil {
		return nil
	}
	if m.now, err = testClock(m.flags.getenv); err != nil {
		return err
	}
	if m.plane, err = m.openPlane(m.now); err != nil {
		return err
	}
	bundles := reconciler.NewStoredBundles(m.Server.Store(), m.flags.getenv(envStatePassphrase), m.log.With("component", "talos"))
	m.Server.Store().OnCommit(func(changes []store.Change) {
		for _, c := range changes {
			if c.Type == store.Deleted && c.Resource.Kind == schema.KindTenant {
				bundles.Forget(c.Resource.Name) // a tenant made again gets a bundle of its own
			}
		}
	})
	m.bundles = bundles
	planeMetrics(m.metrics, m.plane)
	return nil
}

// planeMetrics registers the Talos plane's metrics on mt.
func planeMetrics(mt *metrics.Metrics, plane *talos.Plane) {
	mt.GaugeFunc("rezuscloud_talos_watched_machines", "Machines the Talos plane follows with open COSI watches.", func() float64 { return float64(plane.Watching()) })
	mt.CounterFunc("rezuscloud_talos_probes_total", "Probes of machines over the Talos API (machines without an open watch, and rollouts' checks).", func() float64 { return float64(plane.Probes()) })
	mt.GaugeFunc("rezuscloud_talos_probe_slots", "Probes the Talos plane runs at once at most now: --probe-concurrency, fewer while probes come late but answer when asked again.", func() float64 { return float64(plane.ProbeSlots()) })
}

// observe runs the replica's observer until ctx ends. It passes at once
// when the replica's shards change, so that a tenant taken over is
// observed without waiting for the next pass.
func (m *Main) observe(ctx context.Context) {
	f := m.flags
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.replica.Changed():
				m.plane.Wake()
			}
		}
	}()
	m.plane.RunObserver(ctx, talos.ObserverOptions{
		Bundle: m.bundle, OnMaintenance: m.metalWaiting, Owns: m.replica.Owns,
		Watch: f.history.talosWatch, MaxWatched: f.history.talosWatchMax,
		OnSamples:      reconciler.HistorySamples(m.Server.Store(), m.now, m.log.With("component", "history")),
		SampleInterval: f.history.sampleInterval,
	})
}

// leading returns this replica's reconciler while it leads.
func (m *Main) leading() *reconciler.Reconciler {
	if _, ok := m.replica.Leader(); !ok {
		return nil
	}
	m.recMu.Lock()
	defer m.recMu.Unlock()
	if m.rec == nil {
		return nil
	}
	return m.rec.rec
}

// bundle is the observer's Bundle: the leader's reconciler knows the
// bundles of the tenants it just made; the others' are read from the
// tenants' states.
func (m *Main) bundle(tenant string) []byte {
	if rec := m.leading(); rec != nil {
		return rec.TalosBundle(tenant)
	}
	return m.bundles.Bundle(tenant)
}

// metalWaiting is the observer's OnMaintenance: the tenant's pending run
// starts now (reconciler.MetalWaiting), on the leader, which runs it; a
// replica that does not lead asks the leader through its API, as
// `rezusctl reconcile` would.
func (m *Main) metalWaiting(tenant string) {
	if rec := m.leading(); rec != nil {
		rec.MetalWaiting(tenant)
		return
	}
	if err := m.askLeaderToReconcile(tenant); err != nil {
		m.log.Warn("a machine waits in maintenance mode, and the leader was not told: its tenant's run starts when its backoff ends",
			"tenant", tenant, "err", err)
	}
}

// askLeaderToReconcile asks the leader to run the tenant's pending run
// now (POST /api/v1/reconcile), with a credential of its own that the
// replicas share.
func (m *Main) askLeaderToReconcile(tenant string) error {
	u, ok := leaderURL(m.replica)
	if !ok {
		return fmt.Errorf("no other replica leads")
	}
	body, err := json.Marshal(api.ReconcileRequest{Tenant: tenant})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.JoinPath("/api/v1/reconcile").String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if tokens := m.Server.Tokens(); tokens != nil {
		secret, revoke := tokens.Ephemeral("replica-"+m.replica.Status(nil).Self, backend.RoleEdit)
		defer revoke()
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("the leader at %s answered %s", u.Host, resp.Status)
	}
	return nil
}
