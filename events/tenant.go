package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// tenantDoc is the part of a stored Tenant that events are derived from.
type tenantDoc struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Status struct {
		Phase          schema.TenantPhase    `json:"phase"`
		ObservedCommit string                `json:"observedCommit"`
		Message        string                `json:"message"`
		Retry          *schema.RetryStatus   `json:"retry"`
		Rollout        *schema.RolloutStatus `json:"rollout"`
		Conditions     schema.Conditions     `json:"conditions"`
	} `json:"status"`
}

// signals are what a tenant's status says, as the events compare it.
type signals struct {
	// retry counts the failed runs in a row while a retry is pending, and
	// retryAt is when the next starts: each failed run sets both anew.
	retry   int
	retryAt time.Time
	// stalled is the reason of a True Stalled condition, with its
	// generation; "" when the tenant is not stalled.
	stalled    string
	stalledGen int64
	// applied: the last run applied its revision (Reconciling False,
	// Applied) and nothing failed since.
	applied      bool
	drifted      bool
	upgrading    bool // the Upgrading condition is True
	upToDate     bool // the Upgrading condition is False, UpToDate
	rolloutStop  bool // a rollout stopped at a machine (Upgrading or Stalled say so)
	backupFailed bool
}

// tenant is what the deriver keeps of one tenant.
type tenant struct {
	name     string
	labels   map[string]string
	removing bool
	sig      signals
	// failing: a failure was told (or the tenant failed when the state
	// was loaded), and no Recovered followed yet.
	failing bool
	// rolloutTold: RolloutFailed was told of the rollout that stopped.
	rolloutTold bool
	// machine is the machine the rollout was last seen working on.
	machine string
	// observed is the revision last applied; attempted the revision the
	// tenant's runs last attempted, which its events name, and when that
	// commit was received.
	observed    string
	attempted   notify.Commit
	attemptedAt time.Time
	// bootstrap identifies the commit result whose BootstrapDone was told.
	bootstrap string
}

// rolloutReasons are the Stalled reasons of a rollout that stopped at a
// machine: RolloutFailed tells of them, not Stalled.
func rolloutStalled(reason string) bool {
	return reason == schema.ReasonRolloutFailed || reason == schema.ReasonDrainTimeout
}

// refusedStall are the Stalled reasons of a commit refused as a whole,
// which CommitRefused tells of once for the commit.
func refusedStall(reason string) bool { return reason == schema.ReasonDeletionBlocked }

// signalsOf reads the signals of a tenant's status.
func signalsOf(doc *tenantDoc) signals {
	st := &doc.Status
	var s signals
	if st.Retry != nil {
		s.retry, s.retryAt = max(st.Retry.Attempts, 1), st.Retry.NextAttemptAt
	}
	cs := st.Conditions
	if c := cs.Get(schema.ConditionStalled); c != nil && c.Status == schema.ConditionTrue {
		s.stalled, s.stalledGen = c.Reason, c.ObservedGeneration
	}
	if c := cs.Get(schema.ConditionReconciling); c != nil && c.Status == schema.ConditionFalse && c.Reason == schema.ReasonApplied {
		s.applied = st.Retry == nil && s.stalled == ""
	}
	s.drifted = cs.IsTrue(schema.ConditionDrifted)
	if c := cs.Get(schema.ConditionUpgrading); c != nil {
		s.upgrading = c.Status == schema.ConditionTrue
		s.upToDate = c.Status == schema.ConditionFalse && c.Reason == schema.ReasonUpToDate
		s.rolloutStop = c.Reason == schema.ReasonRolloutFailed
	}
	s.rolloutStop = s.rolloutStop || rolloutStalled(s.stalled)
	s.backupFailed = cs.IsTrue(schema.ConditionBackupFailed)
	return s
}

// loadTenant keeps a stored tenant as the state to compare with: what it
// shows was told before.
func (d *Deriver) loadTenant(tx store.Tx, r store.Resource) error {
	var doc tenantDoc
	if err := json.Unmarshal(r.Object, &doc); err != nil {
		return fmt.Errorf("tenant %s: %w", r.Name, err)
	}
	t := &tenant{name: r.Name}
	t.see(&doc)
	t.failing = t.sig.retry > 0 || (t.sig.stalled != "" && !refusedStall(t.sig.stalled))
	t.rolloutTold = t.sig.rolloutStop
	if t.observed != "" {
		t.attempted = notify.Commit{SHA: t.observed, Subject: d.subject(tx, t.observed)}
	}
	d.tenants[r.Name] = t
	return nil
}

// see records what doc shows of the tenant.
func (t *tenant) see(doc *tenantDoc) {
	t.labels = doc.Metadata.Labels
	t.removing = doc.Status.Phase == schema.TenantRemoving
	t.sig = signalsOf(doc)
	t.observed = doc.Status.ObservedCommit
	if r := doc.Status.Rollout; r != nil && r.Machine != "" {
		t.machine = r.Machine
	}
}

// tenantChanged derives the events of a change of a tenant.
func (d *Deriver) tenantChanged(c store.Change) ([]notify.Event, error) {
	name := c.Resource.Name
	if c.Type == store.Deleted {
		delete(d.tenants, name)
		return nil, nil
	}
	var doc tenantDoc
	if err := json.Unmarshal(c.Resource.Object, &doc); err != nil {
		return nil, err
	}
	t := d.tenants[name]
	if t == nil {
		t = &tenant{name: name}
		d.tenants[name] = t
	}
	was, observed := t.sig, t.observed
	t.see(&doc)
	if t.observed != observed && t.observed != "" && t.attemptedAt.IsZero() {
		// No commit record named a run of the tenant since the start: the
		// revision it applied is the one it attempted.
		t.attempted = d.commitOf(t.observed)
	}
	return d.tenantEvents(t, was, &doc), nil
}

// tenantEvents compares what the tenant shows now with what it showed
// (was), and returns what happened.
func (d *Deriver) tenantEvents(t *tenant, was signals, doc *tenantDoc) []notify.Event {
	now, s, cs := d.opts.Clock.Now(), t.sig, doc.Status.Conditions
	var out []notify.Event
	add := func(reason notify.Reason, sev notify.Severity, machine, msg string) {
		out = append(out, d.tenantEvent(t, reason, sev, machine, msg, now))
	}
	if s.retry > 0 && (s.retry != was.retry || !s.retryAt.Equal(was.retryAt)) {
		r := doc.Status.Retry
		add(notify.ReconcileFailed, notify.SeverityError, "", fmt.Sprintf("the run failed (%s, attempt %d; the next starts at %s): %s",
			r.LastReason, r.Attempts, r.NextAttemptAt.UTC().Format(time.RFC3339), doc.Status.Message))
		t.failing = true
	}
	if s.stalled != "" && (s.stalled != was.stalled || s.stalledGen != was.stalledGen) && !rolloutStalled(s.stalled) && !refusedStall(s.stalled) {
		add(notify.Stalled, notify.SeverityError, "", fmt.Sprintf("stalled (%s); only a new commit helps: %s", s.stalled, condMessage(cs, schema.ConditionStalled)))
		t.failing = true
	}
	out = append(out, d.rolloutEvents(t, was, doc, now)...)
	if s.applied && !was.applied && t.failing {
		ev := d.tenantEvent(t, notify.Recovered, notify.SeverityInfo, "", "revision "+short(t.observed)+" is applied: the tenant recovered", now)
		ev.Commit = d.commitOf(t.observed)
		out = append(out, ev)
		t.failing = false
	}
	switch {
	case s.drifted && !was.drifted:
		add(notify.Drifted, notify.SeverityError, "", condMessage(cs, schema.ConditionDrifted))
	case !s.drifted && was.drifted:
		add(notify.DriftResolved, notify.SeverityInfo, "", cmpOr(condMessage(cs, schema.ConditionDrifted), "the drift is gone"))
	}
	switch {
	case s.backupFailed && !was.backupFailed:
		add(notify.BackupFailed, notify.SeverityError, "", condMessage(cs, schema.ConditionBackupFailed))
	case !s.backupFailed && was.backupFailed:
		add(notify.BackupRecovered, notify.SeverityInfo, "", "an etcd backup succeeded again")
	}
	return out
}

// rolloutEvents tells of a rollout that started, finished, or stopped at
// a machine. A stop shows twice, in the Stalled condition the run
// records and in the Upgrading condition the observer records, and is
// told once.
func (d *Deriver) rolloutEvents(t *tenant, was signals, doc *tenantDoc, now time.Time) []notify.Event {
	s, cs := t.sig, doc.Status.Conditions
	var out []notify.Event
	switch {
	case s.rolloutStop && !t.rolloutTold:
		msg := condMessage(cs, schema.ConditionUpgrading)
		if rolloutStalled(s.stalled) {
			msg = condMessage(cs, schema.ConditionStalled)
		}
		machine := d.machineLabel(t.name, stoppedAt(msg))
		if machine == "" {
			machine = t.machine
		}
		out = append(out, d.tenantEvent(t, notify.RolloutFailed, notify.SeverityError, machine, msg, now))
		t.rolloutTold, t.failing = true, true
	case !s.rolloutStop:
		t.rolloutTold = false
	}
	switch {
	case s.upgrading && !was.upgrading:
		out = append(out, d.tenantEvent(t, notify.RolloutStarted, notify.SeverityInfo, t.machine, condMessage(cs, schema.ConditionUpgrading), now))
	case s.upToDate && was.upgrading:
		out = append(out, d.tenantEvent(t, notify.RolloutSucceeded, notify.SeverityInfo, "", condMessage(cs, schema.ConditionUpgrading), now))
	}
	return out
}

// stoppedAt is the machine a rollout stopped at, as the messages of a
// stopped rollout name it ("… rollout stopped at machine NAME (op): …").
func stoppedAt(msg string) string {
	const at = "rollout stopped at machine "
	_, rest, ok := strings.Cut(msg, at)
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, " (")
	if !ok {
		return ""
	}
	return name
}

// tenantEvent is an event of tenant t, naming the revision it last
// attempted and linking to its page.
func (d *Deriver) tenantEvent(t *tenant, reason notify.Reason, sev notify.Severity, machine, msg string, now time.Time) notify.Event {
	return notify.Event{Reason: reason, Severity: sev, Tenant: t.name, Labels: t.labels, Machine: machine,
		Commit: t.commit(), Message: message(msg), URL: d.link("tenants", t.name), Time: now}
}

// commit is the revision the tenant's events name: the one it last
// attempted, else the one applied.
func (t *tenant) commit() notify.Commit {
	if t.attempted.SHA != "" {
		return t.attempted
	}
	return notify.Commit{SHA: t.observed}
}

// condMessage is the message of the condition of type typ, "" without one.
func condMessage(cs schema.Conditions, typ string) string {
	if c := cs.Get(typ); c != nil {
		return c.Message
	}
	return ""
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
