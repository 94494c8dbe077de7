package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// commitDoc is the part of a stored Commit that events are derived from.
type commitDoc struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec   schema.CommitSpec `json:"spec"`
	Status struct {
		Phase     schema.CommitPhase      `json:"phase"`
		Message   string                  `json:"message"`
		Tenants   []resultDoc             `json:"tenants"`
		Problems  []schema.Problem        `json:"problems"`
		Timings   schema.Timings          `json:"timings"`
		Ancestry  *schema.CommitAncestry  `json:"ancestry"`
		Signature *schema.CommitSignature `json:"signature"`
	} `json:"status"`
}

// resultDoc is the part of a tenant's result that events read (not its
// tofu output).
type resultDoc struct {
	Tenant     string               `json:"tenant"`
	Phase      schema.CommitPhase   `json:"phase"`
	Plan       schema.PlanSummary   `json:"plan"`
	Plane      *schema.PlaneActions `json:"plane"`
	Reason     string               `json:"reason"`
	StartedAt  time.Time            `json:"startedAt"`
	FinishedAt time.Time            `json:"finishedAt"`
}

// attempted reports whether the result is of a run of its tenant: one
// queued, running or finished, and not a tenant whose manifests the
// commit left as they were (which succeeds at once) or one suspended.
func (r resultDoc) attempted() bool {
	switch r.Phase {
	case schema.CommitPending, schema.CommitPlanning, schema.CommitApplying, schema.CommitFailed:
		return true
	case schema.CommitSucceeded:
		return r.Reason != schema.ReasonSuspended && (r.Plane != nil || r.Plan != (schema.PlanSummary{}) || !r.StartedAt.Equal(r.FinishedAt))
	}
	return false
}

// subjectOf is the first line of a commit message.
func subjectOf(msg string) string {
	line, _, _ := strings.Cut(msg, "\n")
	return strings.TrimSpace(line)
}

// commitChanged derives the events of a change of a commit record:
// CommitRefused, BootstrapDone, and the revision its tenants attempt.
func (d *Deriver) commitChanged(c store.Change) ([]notify.Event, error) {
	if c.Type == store.Deleted {
		delete(d.commits, c.Resource.Name)
		return nil, nil
	}
	var doc commitDoc
	if err := json.Unmarshal(c.Resource.Object, &doc); err != nil {
		return nil, err
	}
	if doc.Spec.Preview {
		return nil, nil // a pull request's plan: nothing of it applies
	}
	commit := notify.Commit{SHA: doc.Spec.SHA, Subject: subjectOf(doc.Spec.Message)}
	d.remember(commit)
	now := d.opts.Clock.Now()
	var out []notify.Event
	for _, r := range doc.Status.Tenants {
		t := d.tenants[r.Tenant]
		if t == nil {
			t = &tenant{name: r.Tenant} // its record comes with its first outcome
			d.tenants[r.Tenant] = t
		}
		if r.attempted() && !doc.Status.Timings.ReceivedAt.Before(t.attemptedAt) {
			t.attempted, t.attemptedAt = commit, doc.Status.Timings.ReceivedAt
		}
		if p := r.Plane; p != nil && p.Bootstrap != "" {
			key := doc.Metadata.Name + "@" + r.StartedAt.Format(time.RFC3339Nano)
			if t.bootstrap != key {
				t.bootstrap = key
				ev := d.tenantEvent(t, notify.BootstrapDone, notify.SeverityInfo, p.Bootstrap,
					"etcd was bootstrapped on "+p.Bootstrap+": the cluster exists", now)
				ev.Commit = commit
				out = append(out, ev)
			}
		}
	}
	name := doc.Metadata.Name
	if why := refusal(&doc); why != "" && !d.commits[name] {
		d.commits[name] = true
		out = append(out, notify.Event{Reason: notify.CommitRefused, Severity: notify.SeverityError, Commit: commit,
			Message: message(why), URL: d.link("commits", name), Time: now})
	}
	return out, nil
}

// refusal says why the commit was refused as a whole: invalid manifests,
// a signature that is not trusted, a history that does not descend from
// the last commit applied, or more deletions than the guard allows; ""
// for a commit that was not refused.
func refusal(doc *commitDoc) string {
	st := &doc.Status
	rev := short(doc.Spec.SHA)
	switch {
	case st.Phase == schema.CommitInvalid:
		msg := fmt.Sprintf("commit %s was refused: its manifests are invalid (%d problems), and the last good commit stays applied", rev, len(st.Problems))
		if len(st.Problems) > 0 {
			msg += "; the first: " + st.Problems[0].String()
		}
		return msg
	case st.Signature != nil && st.Signature.Refused:
		what := "it is not signed"
		if st.Signature.Type != "" {
			what = fmt.Sprintf("its %s signature by key %s is not trusted: %s", st.Signature.Type, st.Signature.Key, st.Signature.Reason)
		}
		return fmt.Sprintf("commit %s was refused: %s; nothing was applied, and the last good commit stays applied", rev, what)
	case st.Ancestry != nil && st.Ancestry.Refused:
		return fmt.Sprintf("commit %s was refused: %s; nothing was applied, and the last good commit stays applied", rev, st.Ancestry.Message)
	}
	for _, r := range st.Tenants {
		if r.Reason == schema.ReasonDeletionBlocked {
			return fmt.Sprintf("commit %s was refused by the deletion guard: %s", rev, st.Message)
		}
	}
	return ""
}

// maxSubjects bounds the commit subjects the deriver keeps.
const maxSubjects = 4096

// remember keeps the subject of a commit, for the tenants' events that
// name it later.
func (d *Deriver) remember(c notify.Commit) {
	if len(d.subjects) >= maxSubjects {
		clear(d.subjects)
	}
	d.subjects[c.SHA] = c.Subject
}

// subject returns the subject of the commit sha, from those remembered or
// else from its record in tx (its metadata and spec only); "" when there
// is none.
func (d *Deriver) subject(tx store.Tx, sha string) string {
	if s, ok := d.subjects[sha]; ok {
		return s
	}
	r, err := tx.Get(schema.KindCommit, schema.CommitName(sha))
	if err != nil {
		d.remember(notify.Commit{SHA: sha}) // a revision without a record (a local directory's)
		return ""
	}
	spec, err := commitSpec(r.Object)
	if err != nil {
		d.log.Warn("notifications: read a commit's subject", "commit", sha, "err", err)
		return ""
	}
	d.remember(notify.Commit{SHA: sha, Subject: subjectOf(spec.Message)})
	return d.subjects[sha]
}

// commitOf is the commit sha with its subject, read from the store when
// it is not remembered.
func (d *Deriver) commitOf(sha string) notify.Commit {
	c := notify.Commit{SHA: sha}
	if s, ok := d.subjects[sha]; ok {
		c.Subject = s
		return c
	}
	_ = d.opts.Store.View(func(tx store.Tx) error {
		c.Subject = d.subject(tx, sha)
		return nil
	})
	return c
}

// commitSpec decodes the spec of a stored commit and nothing after it.
func commitSpec(obj []byte) (schema.CommitSpec, error) {
	var spec schema.CommitSpec
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return spec, errors.New("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return spec, err
		}
		if t == "spec" {
			return spec, dec.Decode(&spec)
		}
		if err := dec.Decode(&json.RawMessage{}); err != nil {
			return spec, err
		}
	}
	return spec, errors.New("no spec")
}
