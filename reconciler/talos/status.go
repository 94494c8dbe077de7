package talos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// probe is what o says of machine m for its status: configSHA256 is the
// hash of the config rendered for it ("" when unknown).
func (o Observation) probe(m Machine, configSHA256 string) status.Probe {
	return status.Probe{At: o.At, Connected: o.Connected, Error: o.Error, LastAnswered: o.LastAnswered,
		Stage: o.Stage, Ready: o.Ready, TalosVersion: o.TalosVersion, KubernetesVersion: o.KubernetesVersion,
		ConfigSHA256: o.ConfigSHA256, Want: configSHA256, Services: o.Services, Etcd: o.Etcd, Address: m.Address,
		Hardware: o.Hardware, Network: o.Network, Schematic: o.Schematic, Maintenance: o.Maintenance}
}

// Observed is one machine's observation as the store's Machine has it.
type Observed struct {
	Key     string // the Machine's store key
	Tenant  string
	Machine Machine
	Obs     Observation
	// Status is the machine's status as the observation makes it, and
	// Probe what the observation says for it; both are zero for a
	// machine whose stored status the pass found unchanged
	// (verifiedStatus).
	Status schema.MachineStatus
	Probe  status.Probe
	// EnteredMaintenance is set when the machine was first seen waiting
	// in maintenance mode.
	EnteredMaintenance bool
}

// ObserveMachines probes the store's machines that have a Talos API (a
// management address) through the prober, at most once each per TTL, and
// records the status of those whose observed facts changed, in one
// transaction (status.Recorder.MachineObserved), or one a second while a
// long pass lasts. bundle returns a tenant's secrets bundle, or nil when it is
// not known yet (its machines are then left as they are); it is called
// by one goroutine at a time. It returns the observations, for the
// tenants' status.
//
// It goes through the fleet by tenant, as many tenants at once as the
// prober runs probes (a tenant's machines are probed in parallel, and a
// pass through 250 tenants one at a time spent most of its time waiting
// on each tenant's slowest probe): what it keeps of every machine is only
// its address and place (Machine), and a tenant's stored statuses are
// read after its probes, so a pass holds no decoded Machine beyond those
// tenants'.
func (pl *Plane) ObserveMachines(ctx context.Context, bundle func(tenant string) []byte) ([]Observed, error) {
	return pl.observeMachines(ctx, bundle, nil)
}

// observeMachines is ObserveMachines for the tenants that owns accepts
// (every tenant when it is nil).
func (pl *Plane) observeMachines(ctx context.Context, bundle func(tenant string) []byte, owns func(string) bool) ([]Observed, error) {
	byTenant, err := pl.ownedMachines(owns)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		parts    [][]Observed // by tenant, joined once at the end: appended one to another, 8,000 machines grew 30 MB of garbage a pass
		changed  []Observed
		errs     []error
		bundleMu sync.Mutex
		bundles  = map[string][]byte{} // what bundle gave, for the sampler
		wg       sync.WaitGroup
	)
	// A long pass (a restart's, which reads every machine) writes what
	// it found every passWrite, as it goes.
	stopWriting := every(ctx, passWrite, func(ctx context.Context) {
		if ctx.Err() != nil {
			return // what is left is dropped, as at the end of a pass cut short
		}
		mu.Lock()
		batch := changed
		changed = nil
		mu.Unlock()
		if err := pl.writeStatus(batch); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	sem := make(chan struct{}, pl.prober.opts.Concurrency)
	for tenant, ms := range byTenant {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break // stopping: the other tenants' bundles and probes would be in vain
		}
		wg.Go(func() {
			defer func() { <-sem }()
			bundleMu.Lock()
			var b []byte
			if ctx.Err() == nil { // a tenant started as the pass ends asks for nothing
				b = bundle(tenant)
				bundles[tenant] = b
			}
			bundleMu.Unlock()
			if b == nil {
				return
			}
			obs, ch, err := pl.observeTenant(ctx, tenant, b, ms)
			mu.Lock()
			defer mu.Unlock()
			parts, changed = append(parts, obs), append(changed, ch...)
			errs = append(errs, err)
		})
	}
	wg.Wait()
	stopWriting()
	out := slices.Concat(parts...)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	pl.verified.keepOnly(byTenant) // a machine gone, or now another replica's, is let go of
	pl.polled.Store(pl.unfollowed(byTenant, bundles))
	return out, pl.writeStatus(changed)
}

// passWrite is how long a pass keeps the changes it found before it
// writes them, when it lasts longer than that.
const passWrite = time.Second

// observeTenant observes a tenant's machines ms and returns their
// observations, and those whose stored status they change. A machine
// whose stored status was found at the same stored version to be what
// the same observation makes of it (verifiedStatus) is returned without
// its Status and Probe: nothing of it changed.
func (pl *Plane) observeTenant(ctx context.Context, tenant string, b []byte, ms []Machine) (out, changed []Observed, err error) {
	targets := pl.configTargets(tenant)
	obs := pl.prober.Observe(ctx, tenant, b, ms)
	if err := ctx.Err(); err != nil {
		// Stopping: a probe cut short says nothing of its machine.
		return nil, nil, err
	}
	seen := make([]verifiedStatus, len(ms))
	for i, o := range obs {
		seen[i] = verifiedStatus{at: o.At, want: targets.configSHA256(ms[i])}
	}
	prev, err := pl.storedStatuses(ms, seen)
	if err != nil {
		return nil, nil, err
	}
	out = make([]Observed, 0, len(ms))
	for i, o := range obs {
		m := ms[i]
		p, found := prev[m.ID]
		ob := Observed{Key: m.ID, Tenant: tenant, Machine: m, Obs: o}
		if p.unchanged {
			out = append(out, ob)
			continue
		}
		pr := o.probe(m, seen[i].want)
		st := status.Machine(p.status, pr)
		ob.Status, ob.Probe = st, pr
		ob.EnteredMaintenance = st.Stage == schema.StageMaintenance && p.status.Stage != schema.StageMaintenance
		out = append(out, ob)
		switch {
		case found && !status.SameMachine(p.status, st):
			pl.logConnection(tenant, m, p.status, st)
			changed = append(changed, ob)
		case found:
			seen[i].rv = p.rv
			pl.verified.put(m.ID, seen[i])
		}
	}
	return out, changed, nil
}

// logConnection logs a machine that stopped answering, with why, or
// that answers again: the status keeps only the last error, and the
// history no error at all.
func (pl *Plane) logConnection(tenant string, m Machine, was, is schema.MachineStatus) {
	switch {
	case was.Connected && !is.Connected:
		pl.log.Info("machine stopped answering", "tenant", tenant, "machine", m.ID, "address", m.Address, "err", is.LastError)
	case !was.Connected && is.Connected && !was.LastSeen.IsZero():
		pl.log.Info("machine answers again", "tenant", tenant, "machine", m.ID, "address", m.Address)
	}
}

// verifiedStatus is what a pass last found of a machine whose stored
// status is what its observation makes of it: the stored Machine's
// version, the observation's time and the config hash it was held
// against. While none of them changes, the next pass needs not decode
// the stored status again: with every machine watched, that decode and
// the comparison were two thirds of an idle observer's CPU.
type verifiedStatus struct {
	rv   uint64
	at   time.Time
	want string
}

// verifiedStatuses are the machines' verifiedStatus, by machine id.
type verifiedStatuses struct {
	mu sync.Mutex
	m  map[string]verifiedStatus
}

func (v *verifiedStatuses) put(id string, s verifiedStatus) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[string]verifiedStatus{}
	}
	v.m[id] = s
}

// holds reports whether the machine's status was verified at the stored
// version rv against the observation and config hash of s.
func (v *verifiedStatuses) holds(id string, rv uint64, s verifiedStatus) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	got, ok := v.m[id]
	return ok && got.rv == rv && got.at.Equal(s.at) && got.want == s.want
}

// keepOnly drops the machines that are not among byTenant's, when there
// are more than byTenant holds (so a pass of a steady fleet builds no set).
func (v *verifiedStatuses) keepOnly(byTenant map[string][]Machine) {
	n := 0
	for _, ms := range byTenant {
		n += len(ms)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.m) <= n {
		return
	}
	keep := make(map[string]bool, n)
	for _, ms := range byTenant {
		for _, m := range ms {
			keep[m.ID] = true
		}
	}
	for id := range v.m {
		if !keep[id] {
			delete(v.m, id)
		}
	}
}

func (v *verifiedStatuses) forget(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, id)
}

// storedMachine is what storedMachines decodes of a stored Machine.
type storedMachine struct {
	Metadata schema.ObjectMeta  `json:"metadata"`
	Spec     schema.MachineSpec `json:"spec"`
}

// machineList keeps what storedMachines read until a write to the store
// changes a Machine: every pass of the observer reads the list, which
// changes far less often (8,000 Machines take about 0.15 s of CPU to
// read).
type machineList struct {
	mu       sync.Mutex
	stale    bool
	byTenant map[string][]Machine
}

// follow is the list's commit hook; it reports whether a Machine changed.
func (l *machineList) follow(changes []store.Change) bool {
	for _, c := range changes {
		if c.Resource.Kind == schema.KindMachine {
			l.mu.Lock()
			l.stale = true
			l.mu.Unlock()
			return true
		}
	}
	return false
}

// storedMachines returns the Machines the plane works on (MachineOf), by
// tenant, as the store holds them; the caller must not modify them.
func (pl *Plane) storedMachines() (map[string][]Machine, error) {
	l := pl.machines
	l.mu.Lock()
	if !l.stale {
		defer l.mu.Unlock()
		return l.byTenant, nil
	}
	l.stale = false
	l.mu.Unlock()
	byTenant, err := pl.readMachines()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.stale = true
		return nil, err
	}
	l.byTenant = byTenant // stale again if a Machine changed meanwhile
	return byTenant, nil
}

// ownedMachines is storedMachines of the tenants that owns accepts, or
// of every tenant when it is nil.
func (pl *Plane) ownedMachines(owns func(tenant string) bool) (map[string][]Machine, error) {
	byTenant, err := pl.storedMachines()
	if err != nil || owns == nil {
		return byTenant, err
	}
	out := make(map[string][]Machine, len(byTenant))
	for tenant, ms := range byTenant {
		if owns(tenant) {
			out[tenant] = ms
		}
	}
	return out, nil
}

// readMachines reads the Machines with a management address, by tenant;
// it decodes neither their status nor anything it does not keep.
func (pl *Plane) readMachines() (map[string][]Machine, error) {
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

// storedStatus is a machine's stored status and version, or, when
// unchanged, only that its status stands as verified.
type storedStatus struct {
	status    schema.MachineStatus
	rv        uint64
	unchanged bool
}

// errFound ends a Scan that found what it looked for.
var errFound = errors.New("found")

// storedStatuses reads the stored status of each of ms, by id, unless it
// stands as verified against seen (in the order of ms): then only
// unchanged is set, and nothing is decoded. A machine the store does not
// hold is left out.
func (pl *Plane) storedStatuses(ms []Machine, seen []verifiedStatus) (map[string]storedStatus, error) {
	out := make(map[string]storedStatus, len(ms))
	err := pl.store.View(func(tx store.Tx) error {
		for i, m := range ms {
			err := tx.Scan(schema.KindMachine, m.ID, func(res store.Resource) error {
				if res.Name != m.ID { // the first key after m.ID's place: m.ID is not there
					return errFound
				}
				if pl.verified.holds(m.ID, res.ResourceVersion, seen[i]) {
					out[m.ID] = storedStatus{unchanged: true}
					return errFound
				}
				var st struct {
					Status schema.MachineStatus `json:"status"`
				}
				if err := json.Unmarshal(res.Object, &st); err != nil {
					return fmt.Errorf("decode %s %q: %w", schema.KindMachine, m.ID, err)
				}
				out[m.ID] = storedStatus{status: st.Status, rv: res.ResourceVersion}
				return errFound
			})
			if err != nil && !errors.Is(err, errFound) {
				return err
			}
			if _, ok := out[m.ID]; !ok {
				pl.verified.forget(m.ID)
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

// writeStatus records the observations whose machines' status changed,
// in one write transaction when there are any (status.MachineObserved).
func (pl *Plane) writeStatus(changed []Observed) error {
	if len(changed) == 0 {
		return nil
	}
	slices.SortFunc(changed, func(a, b Observed) int { return strings.Compare(a.Key, b.Key) })
	return pl.store.Update(func(tx store.Tx) error {
		rec := status.Record(tx, pl.opts.Now())
		for _, o := range changed {
			if _, err := rec.MachineObserved(o.Key, o.Probe); err != nil {
				return err
			}
		}
		return nil
	})
}
