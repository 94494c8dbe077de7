package talos

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// MachineStatusOf is a machine's status from an observation: what the
// machine said, or, when it did not answer, the last stage it was seen in
// (ready no more, its services and etcd membership unknown) with
// connected false, the error and the last time it answered. configSHA256
// is the hash of the config rendered for its node group ("" when
// unknown).
func MachineStatusOf(prev schema.MachineStatus, o Observation, configSHA256, address string) schema.MachineStatus {
	s := prev
	s.Connected, s.LastError, s.Message = o.Connected, o.Error, ""
	if address != "" {
		s.Addresses = []string{address}
	}
	if !o.Connected {
		s.Ready, s.Services, s.Etcd = false, nil, nil
		if o.LastAnswered.After(s.LastSeen) {
			s.LastSeen = o.LastAnswered
		}
		switch {
		case o.Stage == schema.StageMaintenance:
			s.Stage, s.ConfigUpToDate = o.Stage, false
		case s.Stage == "" || s.Stage == schema.StageReady || s.Stage == schema.StageMaintenance:
			s.Stage = schema.StageInitializing
		}
		return s
	}
	s.Stage, s.Ready = o.Stage, o.Ready
	if s.Stage == "" {
		s.Stage = schema.StageInitializing
	}
	s.TalosVersion, s.KubernetesVersion = o.TalosVersion, o.KubernetesVersion
	s.ConfigUpToDate = configSHA256 != "" && o.ConfigSHA256 == configSHA256
	s.Services, s.Etcd = o.Services, o.Etcd
	s.LastSeen = o.At
	return s
}

// sameStatus compares observed facts, not when they were seen: a machine
// whose facts stay as they are is not written again.
func sameStatus(a, b schema.MachineStatus) bool {
	a.LastSeen, b.LastSeen = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// Observed is one machine's observation as the store's Machine has it.
type Observed struct {
	Key     string // the Machine's store key
	Tenant  string
	Machine Machine
	Obs     Observation
	Status  schema.MachineStatus
	// EnteredMaintenance is set when the machine was first seen waiting
	// in maintenance mode.
	EnteredMaintenance bool
}

// ObserveMachines probes the store's machines that have a Talos API (a
// management address) through the prober, at most once each per TTL, and
// writes the status of those whose observed facts changed, in one
// transaction. bundle returns a tenant's secrets bundle, or nil when it is
// not known yet (its machines are then left as they are). It returns the
// observations, for the tenants' status.
//
// It goes through the fleet one tenant at a time: what it keeps of every
// machine is only its address and place (Machine), and a tenant's stored
// statuses are read after its probes, so a pass holds no decoded Machine
// beyond one tenant's.
func (pl *Plane) ObserveMachines(ctx context.Context, bundle func(tenant string) []byte) ([]Observed, error) {
	byTenant, err := pl.storedMachines()
	if err != nil {
		return nil, err
	}
	var out, changed []Observed
	for tenant, ms := range byTenant {
		if ctx.Err() != nil {
			break // stopping: the other tenants' bundles and probes would be in vain
		}
		b := bundle(tenant)
		if b == nil {
			continue
		}
		targets := pl.configTargets(tenant)
		obs := pl.prober.Observe(ctx, tenant, b, ms)
		prev, err := pl.storedStatuses(ms)
		if err != nil {
			return out, err
		}
		for i, o := range obs {
			m := ms[i]
			p, found := prev[m.ID]
			st := MachineStatusOf(p, o, targets.configSHA256(m), m.Address)
			ob := Observed{Key: m.ID, Tenant: tenant, Machine: m, Obs: o, Status: st,
				EnteredMaintenance: st.Stage == schema.StageMaintenance && p.Stage != schema.StageMaintenance}
			out = append(out, ob)
			if found && !sameStatus(p, st) {
				changed = append(changed, ob)
			}
		}
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	return out, pl.writeStatus(changed)
}

// storedMachine is what storedMachines decodes of a stored Machine.
type storedMachine struct {
	Metadata schema.ObjectMeta  `json:"metadata"`
	Spec     schema.MachineSpec `json:"spec"`
}

// storedMachines reads the Machines the plane works on (MachineOf), by
// tenant; it decodes neither their status nor anything it does not keep.
func (pl *Plane) storedMachines() (map[string][]Machine, error) {
	byTenant := map[string][]Machine{}
	err := pl.store.View(func(tx store.Tx) error {
		return tx.Scan(schema.KindMachine, "", func(res store.Resource) error {
			var m storedMachine
			if err := json.Unmarshal(res.Object, &m); err != nil {
				return err
			}
			if pm, ok := MachineOf(&schema.Machine{Metadata: m.Metadata, Spec: m.Spec}); ok {
				tenant := schema.TenantOf(schema.KindMachine, &m.Metadata)
				byTenant[tenant] = append(byTenant[tenant], pm)
			}
			return nil
		})
	})
	return byTenant, err
}

// storedStatuses reads the stored status of each of ms, by id; a machine
// gone meanwhile has none.
func (pl *Plane) storedStatuses(ms []Machine) (map[string]schema.MachineStatus, error) {
	out := make(map[string]schema.MachineStatus, len(ms))
	err := pl.store.View(func(tx store.Tx) error {
		for _, m := range ms {
			var st struct {
				Status schema.MachineStatus `json:"status"`
			}
			if err := tx.GetObject(schema.KindMachine, m.ID, &st); err == nil {
				out[m.ID] = st.Status
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return nil
	})
	return out, err
}

// configTargets returns the tenant's rollout record, from which each
// machine's config hash comes (RolloutRecord.configSHA256).
func (pl *Plane) configTargets(tenant string) *RolloutRecord {
	rec, _, err := pl.Rollout(tenant)
	if err != nil {
		return &RolloutRecord{}
	}
	return &rec
}

// writeStatus stores the statuses that changed, in one write transaction
// when there are any; a machine whose stored status meanwhile became the
// observed one is left as it is.
func (pl *Plane) writeStatus(changed []Observed) error {
	if len(changed) == 0 {
		return nil
	}
	return pl.store.Update(func(tx store.Tx) error {
		for _, o := range changed {
			var m schema.Machine
			if err := tx.GetObject(schema.KindMachine, o.Key, &m); err != nil || sameStatus(m.Status, o.Status) {
				continue // gone meanwhile, or already so
			}
			m.Status = o.Status
			if _, err := tx.PutObject(schema.KindMachine, o.Key, &m); err != nil {
				return err
			}
		}
		return nil
	})
}
