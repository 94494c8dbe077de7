// Package notify sends what happens to tenants to the services where
// operators look: chat (Slack, Microsoft Teams, Discord, Google Chat,
// Matrix), incident tools (PagerDuty, Opsgenie, Alertmanager) and generic
// webhooks. It owns the notification config (--notifications), the alerts
// that select events, each provider's payload and its queue, retries and
// coalescing. Delivery never holds up its caller: Notify only queues. It
// must not import the reconciler, backend or the store: they hand it
// Events.
package notify

import "time"

// Severity is how bad an event is.
type Severity string

// The severities of events.
const (
	SeverityInfo  Severity = "info"
	SeverityError Severity = "error"
)

// Reason names what happened.
type Reason string

// The events the server sends.
const (
	ReconcileFailed  Reason = "ReconcileFailed"
	Recovered        Reason = "Recovered"
	Stalled          Reason = "Stalled"
	Drifted          Reason = "Drifted"
	DriftResolved    Reason = "DriftResolved"
	RolloutStarted   Reason = "RolloutStarted"
	RolloutSucceeded Reason = "RolloutSucceeded"
	RolloutFailed    Reason = "RolloutFailed"
	BootstrapDone    Reason = "BootstrapDone"
	BackupFailed     Reason = "BackupFailed"
	BackupRecovered  Reason = "BackupRecovered"
	CommitRefused    Reason = "CommitRefused"
	MachineNotReady  Reason = "MachineNotReady"
	ReplicaLost      Reason = "ReplicaLost"
	// Test is the event `rezusctl notify test` sends.
	Test Reason = "Test"
)

// Commit is the commit an event is about.
type Commit struct {
	SHA     string `json:"sha"`     // full SHA
	Subject string `json:"subject"` // the first line of its message
}

// Short is the commit's short SHA.
func (c Commit) Short() string {
	if len(c.SHA) > 12 {
		return c.SHA[:12]
	}
	return c.SHA
}

// Event is one thing that happened, as a notification tells it.
type Event struct {
	Reason   Reason   `json:"reason"`
	Severity Severity `json:"severity"`
	// Tenant is the tenant it happened to; empty for the server's own
	// events (ReplicaLost, CommitRefused of a whole commit).
	Tenant string `json:"tenant,omitempty"`
	// Labels are the tenant's labels, which alerts select by.
	Labels map[string]string `json:"labels,omitempty"`
	// Machine names the machine, when one is concerned (RolloutFailed,
	// MachineNotReady).
	Machine string `json:"machine,omitempty"`
	// Replica names the replica (ReplicaLost).
	Replica string `json:"replica,omitempty"`
	Commit  Commit `json:"commit,omitzero"`
	// Message says what happened, in a sentence or two. It never holds a
	// secret.
	Message string `json:"message"`
	// URL links to the tenant's page on the dashboard (--external-url);
	// empty when the server has no external URL.
	URL  string    `json:"url,omitempty"`
	Time time.Time `json:"time"`
}

// Sink takes events. Notify must not block: a Sink queues and returns.
type Sink interface {
	Notify(Event)
}
