// Package metrics defines the server's Prometheus metrics in one registry,
// so that every part records into the same names and /metrics serves them.
// On a server that runs as one of several replicas every metric carries
// the constant label replica, the replica's name.
// It holds no logic of its own: callers observe, and gauges that mirror
// another component's state are read from it at scrape time. It imports
// nothing of the project.
package metrics

import (
	"fmt"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the server's collectors. A nil *Metrics records nothing, so
// components can take one optionally.
type Metrics struct {
	// Registry gathers every metric. Collectors are registered with it
	// through reg, which adds the replica label on a replica.
	Registry *prometheus.Registry

	// ReconcileDuration observes one tenant's run, by result
	// (succeeded, failed, unchanged).
	ReconcileDuration *prometheus.HistogramVec
	// TofuDuration observes tofu commands, by command (init, plan, show,
	// apply).
	TofuDuration *prometheus.HistogramVec
	// TofuRuns counts tofu commands by command and result (ok, error).
	TofuRuns *prometheus.CounterVec
	// LastApplied is 1 for the revision last applied to each tenant.
	LastApplied *prometheus.GaugeVec
	// Webhooks counts push webhooks by hook and result.
	Webhooks *prometheus.CounterVec
	// TenantRetries counts the retries scheduled for tenants whose run
	// failed for a passing reason, by tenant and reason.
	TenantRetries *prometheus.CounterVec
	// TenantDrifted is 1 for a tenant whose last drift check found drift,
	// 0 for one it found as applied.
	TenantDrifted *prometheus.GaugeVec
	// Backups counts the etcd backups taken of tenants, by result (ok,
	// error).
	Backups *prometheus.CounterVec
	// TenantBackupFailed is 1 for a tenant whose last etcd backup failed,
	// 0 for one whose last backup succeeded.
	TenantBackupFailed *prometheus.GaugeVec

	reg         prometheus.Registerer
	mu          sync.Mutex
	lastApplied map[string]string
}

var durationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// ReplicaLabel is the constant label that every metric of a replica
// carries, with the replica's name.
const ReplicaLabel = "replica"

// New returns the collectors of a server that runs alone, registered with
// a fresh registry together with the Go and process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	return newMetrics(reg, reg)
}

// NewReplica returns the collectors of the replica named name, as New does,
// with every metric (the Go and process collectors' too) carrying the
// label replica="name". An empty name is New.
func NewReplica(name string) (*Metrics, error) {
	if name == "" {
		return New(), nil
	}
	if !utf8.ValidString(name) {
		return nil, fmt.Errorf("metrics: the replica name %q is not valid UTF-8", name)
	}
	reg := prometheus.NewRegistry()
	return newMetrics(reg, prometheus.WrapRegistererWith(prometheus.Labels{ReplicaLabel: name}, reg)), nil
}

func newMetrics(reg *prometheus.Registry, r prometheus.Registerer) *Metrics {
	m := &Metrics{
		Registry: reg,
		reg:      r,
		ReconcileDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rezuscloud_reconcile_duration_seconds", Help: "Time one tenant's reconcile took, by result.",
			Buckets: durationBuckets,
		}, []string{"result"}),
		TofuDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rezuscloud_tofu_duration_seconds", Help: "Time tofu commands took, by command.",
			Buckets: durationBuckets,
		}, []string{"command"}),
		TofuRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rezuscloud_tofu_runs_total", Help: "tofu commands run, by command and result.",
		}, []string{"command", "result"}),
		LastApplied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rezuscloud_tenant_applied_revision_info", Help: "The revision last applied to each tenant (value 1).",
		}, []string{"tenant", "revision"}),
		Webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rezuscloud_webhooks_total", Help: "Push webhooks received, by hook and result.",
		}, []string{"hook", "result"}),
		TenantRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rezuscloud_tenant_retries_total", Help: "Retries scheduled for tenants whose run failed for a passing reason, by tenant and reason.",
		}, []string{"tenant", "reason"}),
		TenantDrifted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rezuscloud_tenant_drifted", Help: "1 for a tenant whose last drift check found its infrastructure or machine configs changed behind its back, 0 for one found as applied.",
		}, []string{"tenant"}),
		Backups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rezuscloud_etcd_backups_total", Help: "etcd backups of tenants taken, by result (ok, error).",
		}, []string{"result"}),
		TenantBackupFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rezuscloud_tenant_backup_failed", Help: "1 for a tenant whose last etcd backup failed, 0 for one whose last backup succeeded.",
		}, []string{"tenant"}),
		lastApplied: map[string]string{},
	}
	m.reg.MustRegister(m.ReconcileDuration, m.TofuDuration, m.TofuRuns, m.LastApplied, m.Webhooks, m.TenantRetries, m.TenantDrifted,
		m.Backups, m.TenantBackupFailed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registerer is where the collectors of other packages register, so that
// /metrics serves them with the server's own (on a replica with its
// label). A nil *Metrics has none.
func (m *Metrics) Registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// GaugeFunc registers a gauge read from fn at every scrape.
func (m *Metrics) GaugeFunc(name, help string, fn func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// CounterFunc registers a counter read from fn at every scrape; fn must
// never decrease.
func (m *Metrics) CounterFunc(name, help string, fn func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn))
}

// Applied records that revision is now the one applied to tenant; "" drops
// the tenant.
func (m *Metrics) Applied(tenant, revision string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.lastApplied[tenant]; ok {
		if old == revision {
			return
		}
		m.LastApplied.DeleteLabelValues(tenant, old)
	}
	if revision == "" {
		delete(m.lastApplied, tenant)
		return
	}
	m.lastApplied[tenant] = revision
	m.LastApplied.WithLabelValues(tenant, revision).Set(1)
}

// Tofu records one tofu command.
func (m *Metrics) Tofu(command string, seconds float64, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.TofuRuns.WithLabelValues(command, result).Inc()
	m.TofuDuration.WithLabelValues(command).Observe(seconds)
}

// Reconciled records one tenant's reconcile.
func (m *Metrics) Reconciled(result string, seconds float64) {
	if m == nil {
		return
	}
	m.ReconcileDuration.WithLabelValues(result).Observe(seconds)
}

// Retried counts one retry scheduled for tenant, which failed for reason.
func (m *Metrics) Retried(tenant, reason string) {
	if m == nil {
		return
	}
	m.TenantRetries.WithLabelValues(tenant, reason).Inc()
}

// Webhook counts one push webhook.
func (m *Metrics) Webhook(hook, result string) {
	if m == nil {
		return
	}
	m.Webhooks.WithLabelValues(hook, result).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.reg})
}

// Drifted records the finding of a tenant's drift check: 1 drifted, 0 as
// applied; a negative value drops the tenant.
func (m *Metrics) Drifted(tenant string, v float64) {
	if m == nil {
		return
	}
	if v < 0 {
		m.TenantDrifted.DeleteLabelValues(tenant)
		return
	}
	m.TenantDrifted.WithLabelValues(tenant).Set(v)
}

// BackedUp records the result of a tenant's etcd backup; a nil err is a
// success. forget drops the tenant's gauge (it declares no backups).
func (m *Metrics) BackedUp(tenant string, err error, forget bool) {
	if m == nil {
		return
	}
	if forget {
		m.TenantBackupFailed.DeleteLabelValues(tenant)
		return
	}
	result, failed := "ok", 0.0
	if err != nil {
		result, failed = "error", 1
	}
	m.Backups.WithLabelValues(result).Inc()
	m.TenantBackupFailed.WithLabelValues(tenant).Set(failed)
}
