package notify

import "strings"

// What the incident tools (PagerDuty, Opsgenie, Alertmanager) share: one
// open incident per family of events, which a recovery ends.

// dedupKey identifies the incident of m's family: the same for a tenant's
// ReconcileFailed, Stalled and the Recovered that ends them. It uses ':'
// so that it can stand in a URL path.
func dedupKey(m *Notification) string {
	_, f := keysOf(m.Event)
	parts := []string{"rezuscloud", f.name}
	if f.tenant != "" {
		parts = append(parts, f.tenant)
	}
	if f.subject != "" {
		parts = append(parts, f.subject)
	}
	return truncate(strings.Join(parts, ":"), 250)
}

// summary is the one line an incident shows: the title and the first line
// of the event's message.
func summary(m *Notification, max int) string {
	s := m.Title()
	if line, _, _ := strings.Cut(strings.TrimSpace(m.Message), "\n"); line != "" {
		s += ": " + line
	}
	return truncate(s, max)
}

// problemSeverity is the severity an incident of reason r is opened with,
// the same when it is resolved: error but for the events that report
// progress.
func problemSeverity(r Reason) Severity {
	switch r {
	case RolloutStarted, BootstrapDone, Test:
		return SeverityInfo
	}
	return SeverityError
}

// details are the event's facts as a map, for the tools that take one.
func details(m *Notification) map[string]string {
	d := map[string]string{"reason": string(m.Reason), "severity": string(m.Severity)}
	for _, kv := range m.facts() {
		d[strings.ToLower(kv[0])] = kv[1]
	}
	if m.URL != "" {
		d["url"] = m.URL
	}
	return d
}
