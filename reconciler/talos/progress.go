package talos

import (
	"encoding/json"
	"reflect"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/store"
)

// ProgressOf computes the progress a rollout record shows.
func ProgressOf(rec RolloutRecord) status.Rollout {
	p := status.Rollout{Tenant: rec.Tenant, Total: len(rec.Touched)}
	if f := rec.Failed; f != nil {
		p.Failed = &status.RolloutFailure{Machine: labelOf(f.Machine, f.Name), NodeGroup: f.NodeGroup, Op: f.Op, Reason: f.Reason}
	}
	for id, group := range rec.Touched {
		if p.Groups == nil {
			p.Groups = map[string]status.RolloutGroup{}
		}
		g := p.Groups[group]
		g.Total++
		if rec.Finished[id] {
			g.Finished++
		}
		p.Groups[group] = g
	}
	finished := 0
	for id := range rec.Touched {
		if rec.Finished[id] {
			finished++
		}
	}
	p.Active = rec.Failed == nil && (finished < p.Total || rec.Current != nil)
	if u := rec.Kubernetes; u != nil && u.component() != "" {
		p.Kubernetes = u.String()
		p.Active = p.Active || rec.Failed == nil
	}
	if p.Active {
		p.N = min(finished+1, p.Total)
		p.Waiting = rec.Waiting
	}
	if op := rec.Current; op != nil {
		p.Machine, p.MachineID, p.NodeGroup, p.Op = labelOf(op.Machine, op.Name), op.Machine, op.NodeGroup, op.Op
	}
	return p
}

// report tells Options.OnProgress about a change of progress; o is the
// current machine's latest observation, if there is one.
func (pl *Plane) report(rec *RolloutRecord, o *Observation) { pl.reportWaiting(rec, o, "") }

// reportWaiting is report with what the rollout waits for beyond the
// machine (status.Rollout.Waiting).
func (pl *Plane) reportWaiting(rec *RolloutRecord, o *Observation, waiting string) {
	if rec.Waiting != waiting {
		rec.Waiting = waiting
		pl.saveWaiting(rec.Tenant, waiting)
	}
	p := ProgressOf(*rec)
	if o != nil && p.Machine != "" {
		p.Stage = stageWord(*o)
	}
	pl.progressMu.Lock()
	same := reflect.DeepEqual(pl.lastProgress[rec.Tenant], p)
	if !same {
		pl.lastProgress[rec.Tenant] = p
	}
	pl.progressMu.Unlock()
	if !same {
		if pl.opts.OnProgress != nil {
			pl.opts.OnProgress(p)
		}
		pl.Wake() // the observer writes the new progress into status
	}
}

// stageWord is how progress names a machine's stage.
func stageWord(o Observation) string {
	if !o.Connected {
		return "not connected"
	}
	return string(o.Stage)
}

// saveWaiting writes what the tenant's rollout waits for into its stored
// record, and nothing else of it: the rollout saves the rest of its
// record when its steps say so. A failed write is logged; the record
// keeps what it waited for before until the next.
func (pl *Plane) saveWaiting(tenant, waiting string) {
	err := pl.store.Update(func(tx store.Tx) error {
		var rec RolloutRecord
		found, err := getRecord(tx, KindRollout, tenant, &rec)
		if err != nil || !found || rec.Waiting == waiting {
			return err
		}
		rec.Waiting = waiting
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = tx.Put(KindRollout, tenant, b)
		return err
	})
	if err != nil {
		pl.log.Warn("record what a rollout waits for", "tenant", tenant, "err", err)
	}
}
