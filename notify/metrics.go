package notify

import "github.com/prometheus/client_golang/prometheus"

// The results a notification is counted by, in
// rezuscloud_notifications_total.
const (
	resultSent      = "sent"      // delivered
	resultRetried   = "retried"   // an attempt failed; another follows
	resultFailed    = "failed"    // given up: refused, or retries spent
	resultDropped   = "dropped"   // pushed out of a full queue
	resultCoalesced = "coalesced" // an event gathered into another message
)

// metrics are the notifier's collectors.
type metrics struct {
	total *prometheus.CounterVec
	queue []prometheus.Collector
}

func newMetrics(providers []*Provider, length func(i int) func() float64) *metrics {
	m := &metrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rezuscloud_notifications_total",
		Help: "Notifications by provider and result: sent, retried (an attempt failed), failed (given up), dropped (queue full), coalesced (an event gathered into another message).",
	}, []string{"provider", "result"})}
	for i, p := range providers {
		for _, r := range []string{resultSent, resultRetried, resultFailed, resultDropped, resultCoalesced} {
			m.total.WithLabelValues(p.Name, r) // every series from the start, at 0
		}
		m.queue = append(m.queue, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "rezuscloud_notification_queue_length",
			Help:        "Messages waiting in a provider's queue, those held for coalescing included.",
			ConstLabels: prometheus.Labels{"provider": p.Name},
		}, length(i)))
	}
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	if err := r.Register(m.total); err != nil {
		return err
	}
	for _, c := range m.queue {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) count(provider, result string) { m.total.WithLabelValues(provider, result).Inc() }
