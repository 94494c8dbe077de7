package notify

import (
	"strings"
	"time"
)

// PagerDuty takes Events API v2 events: an alert event triggers or
// resolves an incident by dedup_key
// (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/),
// a change event records what is not a problem
// (https://developer.pagerduty.com/docs/events-api-v2/send-change-events/).
// An error triggers; a recovery (Recovered, DriftResolved,
// RolloutSucceeded, BackupRecovered) resolves the incident of its family
// with the same dedup_key; other info events are change events.

type pagerDutyEvent struct {
	RoutingKey  string            `json:"routing_key"`
	EventAction string            `json:"event_action,omitempty"` // trigger, resolve
	DedupKey    string            `json:"dedup_key,omitempty"`
	Payload     *pagerDutyPayload `json:"payload,omitempty"`
	Client      string            `json:"client,omitempty"`
	ClientURL   string            `json:"client_url,omitempty"`
	Links       []pagerDutyLink   `json:"links,omitempty"`
}

type pagerDutyPayload struct {
	Summary       string            `json:"summary"`
	Source        string            `json:"source"`
	Severity      string            `json:"severity,omitempty"` // critical, error, warning, info; alert events only
	Timestamp     string            `json:"timestamp"`
	Component     string            `json:"component,omitempty"`
	Group         string            `json:"group,omitempty"`
	Class         string            `json:"class,omitempty"`
	CustomDetails map[string]string `json:"custom_details,omitempty"`
}

type pagerDutyLink struct {
	Href string `json:"href"`
	Text string `json:"text"`
}

// pagerDutyMaxSummary is the Events API's limit on a summary.
const pagerDutyMaxSummary = 1024

func pagerDutyRequest(p *Provider, m *outgoing) (request, error) {
	base := strings.TrimSuffix(p.address, "/")
	ev := pagerDutyEvent{RoutingKey: p.secret}
	if len(resolves(m.Reason)) > 0 {
		ev.EventAction, ev.DedupKey = "resolve", dedupKey(m.Notification)
		return jsonRequest(base+"/v2/enqueue", ev)
	}
	source := "rezuscloud"
	if m.Tenant != "" {
		source = "rezuscloud tenant " + m.Tenant
	}
	d := details(m.Notification)
	d["message"] = m.text
	payload := &pagerDutyPayload{Summary: summary(m.Notification, pagerDutyMaxSummary), Source: source,
		Timestamp: m.Time.UTC().Format(time.RFC3339), Component: m.Tenant, Group: families[m.Reason].name,
		Class: string(m.Reason), CustomDetails: d}
	ev.Payload = payload
	if m.URL != "" {
		ev.Links = []pagerDutyLink{{Href: m.URL, Text: "RezusCloud dashboard"}}
	}
	if m.Severity != SeverityError {
		payload.Group, payload.Class, payload.Component = "", "", ""
		return jsonRequest(base+"/v2/change/enqueue", ev)
	}
	ev.EventAction, ev.DedupKey = "trigger", dedupKey(m.Notification)
	ev.Client, ev.ClientURL = "RezusCloud", m.URL
	payload.Severity = "error"
	return jsonRequest(base+"/v2/enqueue", ev)
}
