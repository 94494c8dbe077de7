package notify

import (
	"strings"
	"time"
)

// Alertmanager takes alerts with POST /api/v2/alerts
// (https://prometheus.io/docs/alerting/latest/clients/): a list of alerts,
// each identified by its labels. An event fires the alert named after its
// reason; a recovery sends the alerts it ends with the same labels and
// endsAt set. An alert that nothing resolves ends after Alertmanager's
// resolve_timeout. A secretFile, when given, holds a bearer token (for an
// Alertmanager behind a proxy that asks for one).

type alertmanagerAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     string            `json:"startsAt,omitempty"`
	EndsAt       string            `json:"endsAt,omitempty"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// alertLabels are the labels of the alert of reason r in m's family.
func alertLabels(m *Notification, r Reason) map[string]string {
	_, f := keysOf(m.Event)
	l := map[string]string{"alertname": string(r), "severity": string(problemSeverity(r)), "source": "rezuscloud"}
	if f.tenant != "" {
		l["tenant"] = f.tenant
	}
	switch r {
	case MachineNotReady:
		l["machine"] = f.subject
	case ReplicaLost:
		l["replica"] = f.subject
	}
	return l
}

func alertmanagerRequest(p *Provider, m *outgoing) (request, error) {
	annotations := map[string]string{"summary": m.Title(), "description": m.text}
	if m.URL != "" {
		annotations["url"] = m.URL
	}
	var alerts []alertmanagerAlert
	if ended := resolves(m.Reason); len(ended) > 0 {
		for _, r := range ended {
			alerts = append(alerts, alertmanagerAlert{Labels: alertLabels(m.Notification, r), Annotations: annotations,
				EndsAt: m.Time.UTC().Format(time.RFC3339), GeneratorURL: m.URL})
		}
	} else {
		alerts = []alertmanagerAlert{{Labels: alertLabels(m.Notification, m.Reason), Annotations: annotations,
			StartsAt: m.Time.UTC().Format(time.RFC3339), GeneratorURL: m.URL}}
	}
	r, err := jsonRequest(strings.TrimSuffix(p.address, "/")+"/api/v2/alerts", alerts)
	if err == nil && p.secret != "" {
		r.header.Set("Authorization", "Bearer "+p.secret)
	}
	return r, err
}
