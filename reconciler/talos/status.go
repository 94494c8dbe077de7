package talos

import (
	"context"
	"encoding/json"
	"reflect"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/schema"
)

// MachineStatusOf is a machine's status from an observation: what the
// machine said, or, when it did not answer, the last stage it was seen in
// (ready no more) with connected false and the error. configSHA256 is the
// hash of the config rendered for its node group ("" when unknown).
func MachineStatusOf(prev schema.MachineStatus, o Observation, configSHA256, address string) schema.MachineStatus {
	s := prev
	s.Connected, s.LastError, s.Message = o.Connected, o.Error, ""
	if address != "" {
		s.Addresses = []string{address}
	}
	if !o.Connected {
		s.Ready = false
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
	s.LastSeen = o.At
	return s
}

// sameStatus compares observed facts, not when they were seen.
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
func (pl *Plane) ObserveMachines(ctx context.Context, bundle func(tenant string) []byte) ([]Observed, error) {
	byTenant, stored, err := pl.storedMachines()
	if err != nil {
		return nil, err
	}
	var out []Observed
	for tenant, ms := range byTenant {
		if ctx.Err() != nil {
			break // stopping: the other tenants' bundles and probes would be in vain
		}
		b := bundle(tenant)
		if b == nil {
			continue
		}
		targets := pl.configTargets(tenant)
		for i, o := range pl.prober.Observe(ctx, tenant, b, ms) {
			m := ms[i]
			prev := stored[m.ID].Status
			st := MachineStatusOf(prev, o, targets.configSHA256(m), m.Address)
			out = append(out, Observed{Key: m.ID, Tenant: tenant, Machine: m, Obs: o, Status: st,
				EnteredMaintenance: st.Stage == schema.StageMaintenance && prev.Stage != schema.StageMaintenance})
		}
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	return out, pl.writeStatus(out)
}

// storedMachines reads the Machines with a management address, by tenant.
func (pl *Plane) storedMachines() (map[string][]Machine, map[string]*schema.Machine, error) {
	byTenant := map[string][]Machine{}
	stored := map[string]*schema.Machine{}
	err := pl.store.View(func(tx *backend.Tx) error {
		return tx.Scan(schema.KindMachine, "", func(res backend.Resource) error {
			var m schema.Machine
			if err := json.Unmarshal(res.Object, &m); err != nil {
				return err
			}
			if m.Spec.ManagementAddress == "" || m.Metadata.DeletionTimestamp != nil {
				return nil
			}
			tenant := schema.TenantOf(schema.KindMachine, &m.Metadata)
			stored[res.Name] = &m
			byTenant[tenant] = append(byTenant[tenant], Machine{
				ID: res.Name, Name: m.Spec.TFAddress, Address: m.Spec.ManagementAddress,
				NodeGroup: m.Spec.NodeGroup, ControlPlane: m.Spec.Role == schema.RoleControlPlane,
			})
			return nil
		})
	})
	return byTenant, stored, err
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

// writeStatus stores the statuses that changed: a read first, and a write
// transaction only when there is something to write.
func (pl *Plane) writeStatus(obs []Observed) error {
	var changed []Observed
	err := pl.store.View(func(tx *backend.Tx) error {
		for _, o := range obs {
			var m schema.Machine
			if err := tx.GetObject(schema.KindMachine, o.Key, &m); err != nil {
				continue // gone meanwhile
			}
			if !sameStatus(m.Status, o.Status) {
				changed = append(changed, o)
			}
		}
		return nil
	})
	if err != nil || len(changed) == 0 {
		return err
	}
	return pl.store.Update(func(tx *backend.Tx) error {
		for _, o := range changed {
			var m schema.Machine
			if err := tx.GetObject(schema.KindMachine, o.Key, &m); err != nil {
				continue
			}
			m.Status = o.Status
			if _, err := tx.PutObject(schema.KindMachine, o.Key, &m); err != nil {
				return err
			}
		}
		return nil
	})
}
