package reconciler

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Boot stages of a simulated machine, by its age.
var simStages = []struct {
	until time.Duration
	stage schema.MachineStage
}{
	{3 * time.Second, schema.StageInitializing},
	{6 * time.Second, schema.StageInstalling},
	{9 * time.Second, schema.StageConfiguring},
}

// simStage is the stage a simulated machine of that age is in.
func simStage(age time.Duration) schema.MachineStage {
	for _, s := range simStages {
		if age < s.until {
			return s.stage
		}
	}
	return schema.StageReady
}

// ObserveSim is the status plane of the simulated cloud: every interval it
// reads the machines in dir and sets each Machine's observed status (its
// boot stage, derived from its age, and when it was last seen), and the
// ready counts of tenants and node groups. It never touches spec or TF
// state. A machine whose record is gone is reported off until the next
// apply recreates it. It returns when ctx ends.
func (r *Reconciler) ObserveSim(ctx context.Context, dir string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.observeSim(dir); err != nil && ctx.Err() == nil {
			r.log.Debug("observe simulated machines", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Reconciler) observeSim(dir string) error {
	st, err := sim.Open(dir)
	if err != nil {
		return err
	}
	records, listErr := st.List()
	byID := map[string]sim.Record{}
	for _, rec := range records {
		byID[rec.ID] = rec
	}
	now := r.opts.Now()
	// A read pass first: a write transaction (and its fsync) only when an
	// observation changed something.
	changed := false
	if err := r.store.View(func(tx *backend.Tx) error {
		var err error
		changed, err = r.observeTx(tx, byID, listErr == nil, now, false)
		return err
	}); err != nil || !changed {
		if err == nil {
			err = listErr
		}
		return err
	}
	err = r.store.Update(func(tx *backend.Tx) error {
		_, err := r.observeTx(tx, byID, listErr == nil, now, true)
		return err
	})
	if err != nil {
		return err
	}
	return listErr
}

// observeTx applies the observations to the machines, and the statuses
// that follow from them (see package status) to the tenants and node
// groups in tx, and reports whether anything changed; it writes only with
// write set.
func (r *Reconciler) observeTx(tx *backend.Tx, byID map[string]sim.Record, complete bool, now time.Time, write bool) (bool, error) {
	changed := false
	put := func(kind, name string, obj schema.Object) error {
		changed = true
		if !write {
			return nil
		}
		_, err := tx.PutObject(kind, name, obj)
		return err
	}
	list, err := tx.List(schema.KindMachine)
	if err != nil {
		return false, err
	}
	machines := map[string][]*schema.Machine{}
	// api says, for tenants with simulated control planes, whether the
	// simulation has one of them booted: then its Kubernetes API answers.
	api := map[string]bool{}
	for _, res := range list {
		m := new(schema.Machine)
		if err := json.Unmarshal(res.Object, m); err != nil {
			return false, err
		}
		tenant := schema.TenantOf(schema.KindMachine, &m.Metadata)
		machines[tenant] = append(machines[tenant], m)
		if m.Spec.ProviderClass != schema.ProviderSim {
			continue
		}
		ms := observed(m.Status, byID, m.Metadata.Name, complete, now)
		if m.Spec.Role == schema.RoleControlPlane {
			api[tenant] = api[tenant] || ms.Ready
		}
		if statusEqual(ms, m.Status) {
			continue
		}
		ms.LastSeen = now
		m.Status = ms
		if err := put(schema.KindMachine, res.Name, m); err != nil {
			return false, err
		}
	}
	tenants, err := tx.List(schema.KindTenant)
	if err != nil {
		return false, err
	}
	for _, res := range tenants {
		var t schema.Tenant
		if err := json.Unmarshal(res.Object, &t); err != nil {
			return false, err
		}
		name := t.Metadata.Name
		ngs, _, err := storedParts(tx, name)
		if err != nil {
			return false, err
		}
		answers, simulated := api[name]
		if !simulated {
			answers = t.Status.APIReady // nothing here observes its API
		}
		st := status.Compute(status.Tenant{Status: t.Status, Generation: t.Metadata.Generation, NodeGroups: ngs,
			Machines: machines[name], APIAnswers: answers}, now)
		if string(mustJSON(st.Tenant)) != string(mustJSON(t.Status)) {
			t.Status = st.Tenant
			if err := put(schema.KindTenant, res.Name, &t); err != nil {
				return false, err
			}
		}
		for _, ng := range ngs {
			if gs := st.NodeGroups[ng.Metadata.Name]; string(mustJSON(gs)) != string(mustJSON(ng.Status)) {
				ng.Status = gs
				if err := put(schema.KindNodeGroup, scopedKey(name, ng.Metadata.Name), ng); err != nil {
					return false, err
				}
			}
		}
	}
	return changed, nil
}

// observed is the status of simulated machine id given the simulated
// cloud's records: its boot stage by its age, or off when its record is
// gone (and the records read are complete).
func observed(status schema.MachineStatus, byID map[string]sim.Record, id string, complete bool, now time.Time) schema.MachineStatus {
	if rec, ok := byID[id]; ok {
		status.Stage = simStage(now.Sub(rec.CreatedAt))
		status.Ready = status.Stage == schema.StageReady
		status.Message = ""
		if status.Ready {
			status.Addresses = []string{rec.Address}
		}
	} else if complete {
		status.Stage, status.Ready = schema.StageOff, false
		status.Message = "the machine is gone from the simulated cloud; the next apply of its tenant creates it again"
	}
	return status
}

// statusEqual compares the observed facts, not when they were seen.
func statusEqual(a, b schema.MachineStatus) bool {
	a.LastSeen, b.LastSeen = time.Time{}, time.Time{}
	return string(mustJSON(a)) == string(mustJSON(b))
}
