// Package simobserve is the status plane of the simulated cloud: it reads
// the machine records of a sim dir and sets each Machine's observed status
// (its boot stage, derived from its age, and when it was last seen), and
// recomputes the status of tenants and node groups from it through package
// status. It never touches spec or TF state, and it writes only when an
// observation changed something. Probes of the machines' Talos API will
// take its place.
package simobserve

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Boot stages of a simulated machine, by its age.
var stages = []struct {
	until time.Duration
	stage schema.MachineStage
}{
	{3 * time.Second, schema.StageInitializing},
	{6 * time.Second, schema.StageInstalling},
	{9 * time.Second, schema.StageConfiguring},
}

// Stage is the stage a simulated machine of that age is in.
func Stage(age time.Duration) schema.MachineStage {
	for _, s := range stages {
		if age < s.until {
			return s.stage
		}
	}
	return schema.StageReady
}

// DefaultInterval is how often Run observes without Options.Interval.
const DefaultInterval = 2 * time.Second

// Options configure an Observer. Store and Dir are required.
type Options struct {
	Store *backend.Store
	// Dir is the sim dir whose machine records are observed.
	Dir string
	// Interval is how often Run observes. Default DefaultInterval.
	Interval time.Duration
	// Now returns the current time; tests may fix it.
	Now    func() time.Time
	Logger *slog.Logger
}

// Observer observes one sim dir.
type Observer struct{ opts Options }

// New returns an Observer.
func New(opts Options) *Observer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Observer{opts: opts}
}

// Run observes every interval until ctx ends. A machine whose record is
// gone is reported off until the next apply recreates it.
func (o *Observer) Run(ctx context.Context) {
	t := time.NewTicker(o.opts.Interval)
	defer t.Stop()
	for {
		if err := o.Observe(); err != nil && ctx.Err() == nil {
			o.opts.Logger.Debug("observe simulated machines", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Observe observes once.
func (o *Observer) Observe() error {
	st, err := sim.Open(o.opts.Dir)
	if err != nil {
		return err
	}
	records, listErr := st.List()
	obs := observation{byID: map[string]sim.Record{}, complete: listErr == nil, now: o.opts.Now()}
	for _, rec := range records {
		obs.byID[rec.ID] = rec
	}
	// A read pass first: a write transaction (and its fsync) only when an
	// observation changed something.
	changed := false
	if err := o.opts.Store.View(func(tx *backend.Tx) error {
		var err error
		changed, err = obs.apply(tx, false)
		return err
	}); err != nil || !changed {
		if err == nil {
			err = listErr
		}
		return err
	}
	if err := o.opts.Store.Update(func(tx *backend.Tx) error {
		_, err := obs.apply(tx, true)
		return err
	}); err != nil {
		return err
	}
	return listErr
}

// observation is one reading of the simulated cloud's records.
type observation struct {
	byID map[string]sim.Record
	// complete says byID holds every machine: one missing there is gone.
	complete bool
	now      time.Time
}

// changes collects the objects an observation changes; it writes them only
// with write set.
type changes struct {
	tx      *backend.Tx
	write   bool
	changed bool
}

func (c *changes) put(kind, key string, obj schema.Object) error {
	c.changed = true
	if !c.write {
		return nil
	}
	_, err := c.tx.PutObject(kind, key, obj)
	return err
}

// apply applies the observation to the machines, and the statuses that
// follow from them to the tenants and node groups in tx, and reports
// whether anything changed.
func (obs observation) apply(tx *backend.Tx, write bool) (bool, error) {
	c := &changes{tx: tx, write: write}
	machines, api, err := obs.machines(c)
	if err != nil {
		return false, err
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
		if err := obs.tenant(c, &t, machines[t.Metadata.Name], api); err != nil {
			return false, err
		}
	}
	return c.changed, nil
}

// machines sets the observed status of every simulated machine, and
// returns all machines by tenant and, for tenants with simulated control
// planes, whether one of them has booted: the simulation's word that the
// tenant's Kubernetes API answers.
func (obs observation) machines(c *changes) (map[string][]*schema.Machine, map[string]bool, error) {
	list, err := c.tx.List(schema.KindMachine)
	if err != nil {
		return nil, nil, err
	}
	machines := map[string][]*schema.Machine{}
	api := map[string]bool{}
	for _, res := range list {
		m := new(schema.Machine)
		if err := json.Unmarshal(res.Object, m); err != nil {
			return nil, nil, err
		}
		tenant := schema.TenantOf(schema.KindMachine, &m.Metadata)
		machines[tenant] = append(machines[tenant], m)
		if m.Spec.ProviderClass != schema.ProviderSim {
			continue
		}
		ms := obs.status(m)
		if m.Spec.Role == schema.RoleControlPlane {
			api[tenant] = api[tenant] || ms.Ready
		}
		if statusEqual(ms, m.Status) {
			continue
		}
		ms.LastSeen = obs.now
		m.Status = ms
		if err := c.put(schema.KindMachine, res.Name, m); err != nil {
			return nil, nil, err
		}
	}
	return machines, api, nil
}

// status is a simulated machine's status given the records: its boot
// stage by its age, or off when its record is gone.
func (obs observation) status(m *schema.Machine) schema.MachineStatus {
	st := m.Status
	if rec, ok := obs.byID[m.Metadata.Name]; ok {
		st.Stage = Stage(obs.now.Sub(rec.CreatedAt))
		st.Ready = st.Stage == schema.StageReady
		st.Message = ""
		if st.Ready {
			st.Addresses = []string{rec.Address}
		}
	} else if obs.complete {
		st.Stage, st.Ready = schema.StageOff, false
		st.Message = "the machine is gone from the simulated cloud; the next apply of its tenant creates it again"
	}
	return st
}

// tenant recomputes the status of a tenant and its node groups.
func (obs observation) tenant(c *changes, t *schema.Tenant, machines []*schema.Machine, api map[string]bool) error {
	name := t.Metadata.Name
	var ngs []*schema.NodeGroup
	err := c.tx.TenantObjects(name, schema.KindNodeGroup, func(res backend.Resource) error {
		ng := new(schema.NodeGroup)
		ngs = append(ngs, ng)
		return json.Unmarshal(res.Object, ng)
	})
	if err != nil {
		return err
	}
	answers, simulated := api[name]
	if !simulated {
		answers = t.Status.APIReady // nothing here observes its API
	}
	st := status.Compute(status.Tenant{Status: t.Status, Generation: t.Metadata.Generation, NodeGroups: ngs,
		Machines: machines, APIAnswers: answers}, obs.now)
	if !sameJSON(st.Tenant, t.Status) {
		t.Status = st.Tenant
		if err := c.put(schema.KindTenant, name, t); err != nil {
			return err
		}
	}
	for _, ng := range ngs {
		if gs := st.NodeGroups[ng.Metadata.Name]; !sameJSON(gs, ng.Status) {
			ng.Status = gs
			if err := c.put(schema.KindNodeGroup, name+"/"+ng.Metadata.Name, ng); err != nil {
				return err
			}
		}
	}
	return nil
}

// statusEqual compares the observed facts, not when they were seen.
func statusEqual(a, b schema.MachineStatus) bool {
	a.LastSeen, b.LastSeen = time.Time{}, time.Time{}
	return sameJSON(a, b)
}

// sameJSON reports whether a and b are stored as the same JSON, which is
// what a write would change.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
