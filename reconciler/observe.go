package reconciler

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/sim"
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

// observeTx applies the observations to the machines, tenants and node
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
	type counts struct{ ready, cp, cpReady int }
	perTenant := map[string]*counts{}
	perGroup := map[string]int{}
	for _, res := range list {
		var m schema.Machine
		if err := json.Unmarshal(res.Object, &m); err != nil {
			return false, err
		}
		if m.Spec.ProviderClass != schema.ProviderSim {
			continue
		}
		status := m.Status
		if rec, ok := byID[m.Metadata.Name]; ok {
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
		tenant := schema.TenantOf(schema.KindMachine, &m.Metadata)
		c := perTenant[tenant]
		if c == nil {
			c = &counts{}
			perTenant[tenant] = c
		}
		if status.Ready {
			c.ready++
			perGroup[scopedKey(tenant, m.Metadata.Labels[schema.LabelNodeGroup])]++
		}
		if m.Spec.Role == schema.RoleControlPlane {
			c.cp++
			if status.Ready {
				c.cpReady++
			}
		}
		if statusEqual(status, m.Status) {
			continue
		}
		status.LastSeen = now
		m.Status = status
		if err := put(schema.KindMachine, res.Name, &m); err != nil {
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
		c := perTenant[t.Metadata.Name]
		if c == nil {
			c = &counts{}
		}
		s := t.Status
		s.Machines.Ready, s.Machines.ControlPlaneReady = c.ready, c.cpReady
		s.Ready = s.Machines.Desired > 0 && c.ready == s.Machines.Desired
		s.ControlPlaneReady = c.cp > 0 && c.cpReady == c.cp
		s.APIReady = s.ControlPlaneReady
		if s == t.Status {
			continue
		}
		t.Status = s
		if err := put(schema.KindTenant, res.Name, &t); err != nil {
			return false, err
		}
	}
	groups, err := tx.List(schema.KindNodeGroup)
	if err != nil {
		return false, err
	}
	for _, res := range groups {
		var ng schema.NodeGroup
		if err := json.Unmarshal(res.Object, &ng); err != nil {
			return false, err
		}
		if ready := perGroup[res.Name]; ready != ng.Status.Machines.Ready {
			ng.Status.Machines.Ready = ready
			if err := put(schema.KindNodeGroup, res.Name, &ng); err != nil {
				return false, err
			}
		}
	}
	return changed, nil
}

// statusEqual compares the observed facts, not when they were seen.
func statusEqual(a, b schema.MachineStatus) bool {
	a.LastSeen, b.LastSeen = time.Time{}, time.Time{}
	return string(mustJSON(a)) == string(mustJSON(b))
}
