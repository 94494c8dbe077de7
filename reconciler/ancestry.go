package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
	"github.com/rezuscloud/rezuscloud/store"
)

// A commit of the main ref descends from the last one applied, unless the
// ref was force-pushed back to an older commit or its history rewritten.
// Such a commit is marked NonFastForward, with the commit it does not
// descend from, and applied like any other. With signatures verified it is
// refused instead: a signature says who made a commit, not that it is the
// newest, and an older signed commit would undo what came after it. The
// refusal lifts with a signed commit on top of the refused one, or with
// Options.AllowNonFastForward. The last commit applied and the last one
// refused are kept in the store, so that a restart refuses the same
// commit again.

// lineage is the store's record (kindLineage) of the main ref's history as
// the reconciler took it.
type lineage struct {
	// Source and Ref name the repository and the ref the commits came
	// from; once the server follows another, the record is not compared
	// with.
	Source string `json:"source"`
	Ref    string `json:"ref"`
	// Applied is the last revision whose manifests the reconciler took
	// (validated and queued); a refused or invalid revision is not one.
	Applied string `json:"applied"`
	// Refused is the last revision refused for not descending from
	// Applied, until a revision is applied.
	Refused string `json:"refused,omitempty"`
}

// lineage reads the record; without one, the last revision received
// stands for the last applied (a store from before the record existed).
func (r *Reconciler) lineage() (lineage, error) {
	var l lineage
	err := r.store.View(func(tx store.Tx) error {
		res, err := tx.Get(kindLineage, "main")
		if errors.Is(err, store.ErrNotFound) {
			if res, err := tx.Get(kindObserved, "main"); err == nil {
				return json.Unmarshal(res.Object, &l.Applied)
			}
			return nil
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(res.Object, &l)
	})
	return l, err
}

// putLineage writes the record unless it holds l already (a revision
// applied again writes nothing).
func (r *Reconciler) putLineage(l lineage) error {
	var same bool
	_ = r.store.View(func(tx store.Tx) error {
		var old lineage
		res, err := tx.Get(kindLineage, "main")
		same = err == nil && json.Unmarshal(res.Object, &old) == nil && old == l
		return nil
	})
	if same {
		return nil
	}
	return r.store.Update(func(tx store.Tx) error {
		_, err := tx.Put(kindLineage, "main", mustJSON(l))
		return err
	})
}

// recordApplied notes the revision as the last one applied; see lineage.
func (run *CommitRun) recordApplied() {
	s := run.snap
	if err := run.r.putLineage(lineage{Source: s.Source, Ref: s.Ref, Applied: s.Revision}); err != nil {
		run.r.log.Error("record the applied revision", "revision", s.Revision, "err", err)
	}
}

// checkAncestry compares the revision with the last one applied: one that
// does not descend from it is marked, and with signatures verified refused
// (see above). It runs after the signature check, so a snapshot with a
// Signature here is verified.
func (run *CommitRun) checkAncestry(context.Context) (stepResult, error) {
	r, snap := run.r, run.snap
	l, err := r.lineage()
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	if (l.Source != "" || l.Ref != "") && (l.Source != snap.Source || l.Ref != snap.Ref) {
		return stepNext, nil
	}
	if l.Applied == "" || l.Applied == snap.Revision {
		return stepNext, nil
	}
	ok, err := snap.Descends(l.Applied)
	if ok || errors.Is(err, sources.ErrNoHistory) {
		return stepNext, nil
	}
	why := fmt.Sprintf("%s does not descend from %s, the last commit applied", shortRev(snap.Revision), shortRev(l.Applied))
	if err != nil {
		why = fmt.Sprintf("cannot tell whether %s descends from %s, the last commit applied: %v", shortRev(snap.Revision), shortRev(l.Applied), err)
	}
	a := &schema.CommitAncestry{LastApplied: l.Applied}
	run.commit.Status.NonFastForward, run.commit.Status.Ancestry = true, a
	run.previous = nil // an earlier record of the revision does not say this
	switch {
	case snap.Signature == nil:
		a.Message = why + "; applied: signatures are not verified"
	case r.opts.AllowNonFastForward:
		a.Message = why + "; applied: --allow-non-fast-forward lets it through"
	case onRefused(snap, l.Refused):
		a.Message = fmt.Sprintf("%s; applied: it is a signed commit on top of %s, which was refused for that", why, shortRev(l.Refused))
	default:
		a.Refused, a.Message = true, why
		l.Source, l.Ref, l.Refused = snap.Source, snap.Ref, snap.Revision
		if err := r.putLineage(l); err != nil {
			return stepNext, retry(schema.ReasonStoreError, err)
		}
		r.log.Warn("commit refused: it does not descend from the last commit applied", "revision", snap.Revision, "last_applied", l.Applied)
		return stepNext, stall(schema.ReasonNonFastForward, fmt.Errorf("%s (a force push or a history rewrite); --verify-signatures refuses it: nothing was applied, the last good commit stays in effect. A signed commit on top of it, or --allow-non-fast-forward, lets it through", why))
	}
	r.log.Warn("commit does not descend from the last commit applied", "revision", snap.Revision, "last_applied", l.Applied, "why", a.Message)
	return stepNext, nil
}

// onRefused reports whether snap is a commit on top of refused, which is
// not snap itself.
func onRefused(snap sources.Snapshot, refused string) bool {
	if refused == "" || refused == snap.Revision {
		return false
	}
	ok, err := snap.Descends(refused)
	return ok && err == nil
}

// shortRev is a revision as the commit's messages name it: its first 12
// characters.
func shortRev(rev string) string { return rev[:min(len(rev), 12)] }
