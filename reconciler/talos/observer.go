package talos

import (
	"cmp"
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// ObserverOptions configure Plane.RunObserver.
type ObserverOptions struct {
	// Interval is how often the machines are looked at; each is probed at
	// most once per the prober's TTL all the same. Default 2 s; with
	// Watch, DefaultKubernetesInterval while every machine is watched,
	// and 2 s while the bound (MaxWatched) leaves machines to probes, so
	// that each is probed within 2 s of its TTL.
	Interval time.Duration
	// Bundle returns a tenant's secrets bundle, or nil when it is not
	// known (its machines are then left as they are).
	Bundle func(tenant string) []byte
	// OnMaintenance, when set, is called with a tenant one of whose
	// machines was just seen waiting in maintenance mode for its config,
	// once each time a machine enters it. It must not block for long.
	OnMaintenance func(tenant string)
	// AfterFirstPass, when set, is called once, after the first pass
	// through the fleet (which asks for every tenant's bundle).
	AfterFirstPass func()
	// KubernetesInterval is how often each tenant's Kubernetes API is
	// looked at (Nodes, /readyz); default DefaultKubernetesInterval.
	KubernetesInterval time.Duration
	// Watch makes the observer follow every machine with a COSI watch
	// (watch.go) instead of probing it once per probe TTL: a change
	// reaches the store at once, and a machine is probed only while its
	// watch is broken. Off, machines are probed as before.
	Watch bool
	// MaxWatched bounds how many machines are watched at once (control
	// planes first, then by tenant and machine id); the others are
	// probed once per probe TTL. 0 means DefaultMaxWatched; negative,
	// no bound.
	MaxWatched int
	// OnSamples, when set, is given every SampleInterval the gauges of
	// the watched machines that answered (sampler.go), by tenant and
	// machine. It must not block for long.
	OnSamples func(samples map[string]map[string]schema.MachineSample)
	// SampleInterval is how often the gauges are sampled; default
	// DefaultSampleInterval.
	SampleInterval time.Duration
	// Owns, when set, says which tenants this observer looks after: the
	// machines of the others are neither probed nor watched, and their
	// status and their tenant's are left to the observer that owns them
	// (a replica observes the tenants of the shards it holds). It is asked
	// at every pass, so a tenant that moves is let go of, or taken up, at
	// the next. nil: every tenant.
	Owns func(tenant string) bool
	// RegateInterval is how often a worker's watch that opened directly
	// after its open through a control plane failed looks for a control
	// plane to forward it again (watch.go); default a minute. One that
	// opened directly for want of such a control plane looks every 2 s.
	RegateInterval time.Duration
	// StreamQuiet is how long a stream connection (the watches' and
	// events streams') may read nothing before its machine is asked
	// whether it still answers (Pool.CheckQuietStreams); default
	// DefaultStreamQuiet. It is looked for every third of it.
	StreamQuiet time.Duration
}

// DefaultStreamQuiet is how long a stream connection may read nothing
// before its machine is asked whether it answers: longer than the
// minute between samples, which the connections of events streams carry,
// so that only those without samples are asked.
const DefaultStreamQuiet = 90 * time.Second

// RunObserver keeps the status of machines, node groups and tenants in
// the store up to date with what the machines say, until ctx ends: every
// interval, and at once when a rollout's progress changes. Machine status
// comes from the probes (ObserveMachines); the tenants' and node groups'
// is recorded through status.Recorder.TenantObserved, with the Kubernetes
// API answering when a control plane runs kube-apiserver and the rollout's
// progress from the tenant's rollout record (ProgressOf), which give the
// Upgrading condition and status.rollout.
func (pl *Plane) RunObserver(ctx context.Context, opts ObserverOptions) {
	interval := opts.Interval
	if interval <= 0 {
		interval = probePass
		if opts.Watch {
			// Machines' changes come by their watches, new Machines by the
			// store's commit: the pass at the interval is for the tenants'
			// Kubernetes APIs, and for the machines beyond the bound.
			interval = DefaultKubernetesInterval
		}
	}
	if opts.KubernetesInterval <= 0 {
		opts.KubernetesInterval = DefaultKubernetesInterval
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	if opts.Watch {
		pl.watching.Store(true)
		defer pl.watching.Store(false)
		defer pl.watches.stop()
		stop := pl.startQuietChecks(ctx, cmp.Or(opts.StreamQuiet, DefaultStreamQuiet))
		defer stop()
	}
	if opts.OnSamples != nil {
		stop := pl.startSampler(ctx, opts)
		defer stop()
	}
	start := time.Now()
	for first := true; ; first = false {
		if err := pl.observeOnce(ctx, opts); err != nil && ctx.Err() == nil {
			pl.log.Debug("observe machines", "err", err)
		}
		if first && ctx.Err() == nil {
			pl.log.Info("observed every machine once", "took", time.Since(start).Round(time.Millisecond))
			if opts.AfterFirstPass != nil {
				opts.AfterFirstPass()
			}
		}
		next := interval
		if opts.Interval <= 0 && pl.watches.leftOut.Load() {
			// A probe waits for a pass: as often as without watches.
			next = probePass
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-pl.kick:
		}
	}
}

// startQuietChecks resets the stream connections that read nothing for
// quiet and then do not answer a call in time either, every third of
// quiet, until ctx ends or the returned function is called: their
// watches and events streams end, and open again on new connections,
// which a machine that stopped answering does not take, so that it shows
// as not connected about quiet and a half after it fell silent (with the
// timeouts of the call, the new connection and the probe) instead of
// after the keepalive's 6 minutes.
func (pl *Plane) startQuietChecks(ctx context.Context, quiet time.Duration) (stop func()) {
	return every(ctx, quiet/3, func(ctx context.Context) {
		for _, q := range pl.pool.CheckQuietStreams(ctx, quiet, pl.prober.opts.Timeout) {
			pl.log.Warn("a machine's stream connection read nothing and did not answer in time: closed, its streams open again",
				"tenant", q.Tenant, "address", q.Address, "quiet", quiet)
		}
	})
}

// probePass is how often the observer passes while machines are probed:
// a machine whose observation is older than the probe TTL is probed at
// the next pass.
const probePass = 2 * time.Second

// ObserveOnce observes the machines once and writes what changed.
func (pl *Plane) ObserveOnce(ctx context.Context, bundle func(string) []byte) error {
	return pl.observeOnce(ctx, ObserverOptions{Bundle: bundle})
}

func (pl *Plane) observeOnce(ctx context.Context, opts ObserverOptions) error {
	// A pass asks for each tenant's bundle once, for its machines and its
	// Kubernetes API alike.
	bundles := map[string][]byte{}
	bundle := func(tenant string) []byte {
		b, ok := bundles[tenant]
		if !ok {
			b = opts.Bundle(tenant)
			bundles[tenant] = b
		}
		return b
	}
	if opts.Watch {
		byTenant, err := pl.ownedMachines(opts.Owns)
		if err != nil {
			return err
		}
		pl.watches.sync(ctx, byTenant, bundle, cmp.Or(opts.MaxWatched, DefaultMaxWatched), cmp.Or(opts.RegateInterval, watchHealthy))
	}
	obs, err := pl.observeMachines(ctx, bundle, opts.Owns)
	if err != nil {
		return err
	}
	api := map[string]bool{}
	observed := map[string]bool{}
	waiting := map[string]bool{}
	for _, o := range obs {
		observed[o.Tenant] = true
		if o.EnteredMaintenance && opts.OnMaintenance != nil && !waiting[o.Tenant] {
			waiting[o.Tenant] = true
			pl.log.Info("a machine waits in maintenance mode", "tenant", o.Tenant, "machine", o.Key)
			opts.OnMaintenance(o.Tenant)
		}
		if o.Machine.ControlPlane && o.Obs.Connected && o.Obs.APIServerRunning {
			api[o.Tenant] = true
		}
	}
	every := opts.KubernetesInterval
	if every <= 0 {
		every = DefaultKubernetesInterval
	}
	api = pl.observeKubernetes(ctx, obs, api, bundle, every)
	return pl.writeTenants(observed, api)
}

// writeTenants records what the observer saw of the observed tenants
// (status.TenantObserved): whether their Kubernetes API answers, and
// where their rollouts stand. A read pass comes first, and a write
// transaction only when something differs. A tenant is left out when
// neither what the observer saw of it nor any Tenant, NodeGroup or
// Machine in the store changed since it was last recorded: its status,
// which only those make, is as recorded then.
func (pl *Plane) writeTenants(observed, api map[string]bool) error {
	inputs := pl.tenants.inputs.Load()
	obs := map[string]status.Observation{}
	for tenant := range observed {
		o := status.Observation{APIAnswers: api[tenant]}
		if rec, found, err := pl.Rollout(tenant); err == nil && found {
			o.Rollout = ProgressOf(rec) // with what it waits for, as it last reported
			if rec.Current != nil {
				if last, ok := pl.prober.Last(rec.Current.Machine); ok {
					o.Rollout.Stage = stageWord(last)
				}
			}
		}
		obs[tenant] = o
	}
	due := pl.tenants.due(inputs, obs)
	if len(due) == 0 {
		return nil
	}
	_, err := status.WriteChanged(pl.store, pl.opts.Now(), func(rec status.Recorder) (bool, error) {
		changed := false
		for tenant, o := range due {
			c, err := rec.TenantObserved(tenant, o)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	})
	if err == nil {
		pl.tenants.recorded(inputs, obs)
	}
	return err
}

// tenantsWritten is what the observer last recorded of the tenants, and
// whether the store's Tenants, NodeGroups or Machines changed since.
type tenantsWritten struct {
	// inputs counts the commits that changed a Tenant, NodeGroup or
	// Machine.
	inputs atomic.Uint64
	mu     sync.Mutex
	at     uint64                        // inputs when last recorded
	obs    map[string]status.Observation // by tenant, as last recorded
}

// follow counts a commit that changes what a tenant's status is made of.
func (w *tenantsWritten) follow(changes []store.Change) {
	for _, c := range changes {
		switch c.Resource.Kind {
		case schema.KindTenant, schema.KindNodeGroup, schema.KindMachine:
			w.inputs.Add(1)
			return
		}
	}
}

// due returns the tenants of obs to record: all of them when the store's
// inputs changed since the last record, else those whose observation
// did.
func (w *tenantsWritten) due(inputs uint64, obs map[string]status.Observation) map[string]status.Observation {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.obs == nil || inputs != w.at {
		return obs
	}
	due := map[string]status.Observation{}
	for tenant, o := range obs {
		if last, ok := w.obs[tenant]; !ok || !reflect.DeepEqual(last, o) {
			due[tenant] = o
		}
	}
	return due
}

// recorded notes that obs was recorded with the store's inputs at inputs.
func (w *tenantsWritten) recorded(inputs uint64, obs map[string]status.Observation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at, w.obs = inputs, obs
}
