package reconciler

import (
	"context"
	"errors"
	"log/slog"

	"github.com/rezuscloud/rezuscloud/internal/window"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// The Talos plane's steps of a tenant run (see steps.go): after Finish has
// recorded the machines, Bootstrap makes sure the tenant's etcd exists and
// Rollout brings every machine to its node group's config, Talos version
// and declared restarts, one machine at a time (package reconciler/talos).
// A tenant whose manifests did not change runs them too, after
// ConfigureMetal, while the plane has work left for it: a bootstrap not
// done yet, a rollout a restart of the server interrupted, a restart its
// annotations declare, or a bare-metal machine that waits in maintenance
// mode (the observer saw it there and asked for the run, MetalWaiting).
// While they run, the tenant stays Reconciling (status.InPlane, recorded
// by Finish); planeDone records it applied when they end without error.

// talosDesired is what the tenant's machines should run, as this run
// rendered it: each node group's config, and a bare-metal machine's own
// (metalConfigs).
func (t *tenantRun) talosDesired() (talos.Desired, error) {
	td := t.desired
	configs, err := metalConfigs(td, t.ws, t.machines)
	if err != nil {
		return talos.Desired{}, err
	}
	d := talos.Desired{
		Tenant: t.name, Bundle: t.bundle, Machines: talos.MachinesOf(t.machines),
		Groups: map[string]talos.GroupTarget{}, Configs: configs,
		RestartedAt: td.Tenant.Metadata.Annotations[schema.AnnotationRestartedAt],
		Suspended:   func() bool { return t.r.suspended(t.name) },
		Windows:     t.win.set, KubernetesVersion: td.Tenant.Spec.KubernetesVersion,
		Endpoint: td.Tenant.Spec.ControlPlaneEndpoint, Drains: drains(td), Newer: t.job.newerRevision(),
	}
	if ro := td.Tenant.Spec.Rollout; ro != nil {
		d.WaitFor = ro.WaitFor
	}
	d.Snapshot, d.SnapshotRequired = t.snapshotGate(), td.Tenant.Spec.Backup != nil
	if td.Encrypted() { // what the machines answer may quote the decrypted values
		d.Scrub = scrubber(td)
	}
	d.KubernetesStage = func(from string, next int) (map[string][]byte, map[string][]byte, error) {
		groups, err := t.r.modules.MachineConfigsHolding(td, t.bundle, from, next)
		if err != nil {
			return nil, nil, err
		}
		machines, err := metalConfigsOf(td, func(g string) []byte { return groups[g] }, t.machines)
		return groups, machines, err
	}
	for _, ng := range td.NodeGroups {
		d.Groups[ng.Metadata.Name] = talos.GroupTarget{
			Config:       []byte(t.ws.Variables[render.MachineConfigVariable(ng.Metadata.Name)]),
			TalosVersion: rtalos.InputFor(td, ng, nil).TalosVersion,
			RestartedAt:  ng.Metadata.Annotations[schema.AnnotationRestartedAt],
		}
	}
	return d, nil
}

// drains are the drain policies of the tenant's node groups.
func drains(td *schema.TenantDesired) map[string]schema.Drain {
	out := map[string]schema.Drain{}
	for _, ng := range td.NodeGroups {
		out[ng.Metadata.Name] = schema.EffectiveDrain(td.Tenant.Spec.Drain, ng.Spec.Drain)
	}
	return out
}

// drainCheck wraps a plan check: before a plan that removes or replaces
// machines is applied, the Nodes of those machines are drained
// (Plane.DrainRemoved), one at a time; a drain that does not finish
// stalls the run with reason DrainTimeout, and nothing is applied.
func (t *tenantRun) drainCheck(ctx context.Context, check tofu.Check) tofu.Check {
	pl := t.r.opts.Talos
	if pl == nil {
		return check
	}
	return func(gone []tofu.PlannedChange) error {
		if err := check(gone); err != nil || len(gone) == 0 {
			return err
		}
		stored, err := t.r.storedMachines(t.name)
		if err != nil {
			return retry(schema.ReasonStoreError, err)
		}
		addresses := map[string]bool{}
		for _, c := range gone {
			addresses[c.Address] = true
		}
		var removed []talos.Machine
		for _, m := range talos.MachinesOf(stored) {
			if addresses[m.Name] {
				removed = append(removed, m)
			}
		}
		if len(removed) == 0 {
			return nil
		}
		if err := pl.DrainRemoved(ctx, t.kubeDesired(stored), removed); err != nil {
			return talosError(err)
		}
		t.removed = append(t.removed, removed...)
		return nil
	}
}

// drainRemoved drains, before they are reset, the Nodes of the bare-metal
// machines a commit takes out (Plane.DrainRemoved); their Nodes are
// deleted after the apply, with those of the other machines it removes.
func (t *tenantRun) drainRemoved(ctx context.Context, removed, stored []*schema.Machine) error {
	pl := t.r.opts.Talos
	if pl == nil {
		return nil
	}
	ms := talos.MachinesOf(removed)
	if err := pl.DrainRemoved(ctx, t.kubeDesired(stored), ms); err != nil {
		return talosError(err)
	}
	t.removed = append(t.removed, ms...)
	return nil
}

// deleteRemovedNodes deletes, after an apply, the Nodes of the machines
// it removed (drainCheck).
func (t *tenantRun) deleteRemovedNodes(ctx context.Context) {
	if len(t.removed) == 0 {
		return
	}
	stored, err := t.r.storedMachines(t.name)
	if err != nil {
		return
	}
	t.r.opts.Talos.DeleteNodes(ctx, t.kubeDesired(stored), t.removed)
	t.removed = nil
}

// kubeDesired is what the plane needs of the tenant to reach its
// Kubernetes API and drain: its machines, bundle, endpoint and drain
// policies.
func (t *tenantRun) kubeDesired(machines []*schema.Machine) talos.Desired {
	return talos.Desired{Tenant: t.name, Bundle: t.bundle, Machines: talos.MachinesOf(machines),
		Endpoint: t.desired.Tenant.Spec.ControlPlaneEndpoint, Drains: drains(t.desired), Newer: t.job.newerRevision()}
}

// talosWanted reports whether a tenant whose manifests did not change
// still needs the plane.
func (t *tenantRun) talosWanted() (bool, error) {
	pl := t.r.opts.Talos
	if pl == nil {
		return false, nil
	}
	reachable, metalWaiting, err := t.r.index.talosFacts(t.name)
	if err != nil || !reachable {
		return false, err // no machine the plane works on
	}
	if metalWaiting {
		return true, nil // ConfigureMetal has a machine to configure
	}
	if value, err := t.restoreValue(); err != nil || value != "" {
		return value != "", err // a restore is pending
	}
	restarts := talos.RestartValues{Tenant: t.desired.Tenant.Metadata.Annotations[schema.AnnotationRestartedAt],
		Groups: map[string]string{}}
	for _, ng := range t.desired.NodeGroups {
		restarts.Groups[ng.Metadata.Name] = ng.Metadata.Annotations[schema.AnnotationRestartedAt]
	}
	return pl.Wanted(t.name, restarts, t.desired.Tenant.Spec.KubernetesVersion)
}

// talosUnchanged runs the plane's steps for a tenant whose workspace is
// the one applied, on its stored machines, when the plane has work left
// (talosWanted).
func (t *tenantRun) talosUnchanged(ctx context.Context) error {
	machines, err := t.r.storedMachines(t.name)
	if err != nil {
		return retry(schema.ReasonStoreError, err)
	}
	t.machines = machines
	for _, step := range []func(*tenantRun, context.Context) (stepResult, error){(*tenantRun).configureMetal, (*tenantRun).bootstrap, (*tenantRun).restore, (*tenantRun).rollout} {
		if _, err := step(t, ctx); err != nil {
			return err
		}
	}
	return nil
}

// bootstrap bootstraps the tenant's etcd once (Plane.Bootstrap). A
// bare-metal machine that ConfigureMetal did not reach makes the run a
// Retry here, before the plane waits for it.
func (t *tenantRun) bootstrap(ctx context.Context) (stepResult, error) {
	if t.metalErr != nil {
		return stepNext, retry(schema.ReasonWaitingForMachines, t.metalErr)
	}
	pl := t.r.opts.Talos
	if pl == nil {
		return stepNext, nil
	}
	if t.r.suspended(t.name) {
		return stepDone, nil // suspended meanwhile: the run that resumes it bootstraps
	}
	if value, err := t.restoreValue(); err != nil || value != "" {
		return stepNext, err // the restore bootstraps the tenant's etcd from its backup
	}
	was, _, err := pl.Bootstrapped(t.name)
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	rec, err := pl.Bootstrap(ctx, t.name, t.bundle, talos.MachinesOf(t.machines))
	if rec.Done && !rec.Adopted && (!was.Done || was.Machine != rec.Machine) {
		t.planeActions().Bootstrap = t.machineName(rec.Machine)
	}
	return stepNext, talosError(err)
}

// rollout rolls the rendered configs, Talos versions and declared
// restarts through the machines (Plane.Roll).
func (t *tenantRun) rollout(ctx context.Context) (stepResult, error) {
	pl := t.r.opts.Talos
	if pl == nil {
		return stepNext, nil
	}
	d, err := t.talosDesired()
	if err != nil {
		return stepNext, stall(schema.ReasonInvalidManifests, err)
	}
	rolled, err := pl.Roll(ctx, d)
	if len(rolled.Machines) > 0 {
		a := t.planeActions()
		a.Machines += len(rolled.Machines)
		a.Configs += rolled.Ops[talos.OpApply]
		a.Upgrades += rolled.Ops[talos.OpUpgrade]
		a.Restarts += rolled.Ops[talos.OpReboot]
	}
	return stepNext, talosError(err)
}

// planeWorks reports whether the plane's steps have work on the run's
// machines: there is a plane, and it works on one of them at least.
func (t *tenantRun) planeWorks() bool {
	return t.r.opts.Talos != nil && len(talos.MachinesOf(t.machines)) > 0
}

// planeDone is the part of conclude that ends a run in the plane: once
// the plane's steps have run without error, the tenant's status says that
// the revision is applied. Finish (or a finish of an unchanged tenant)
// had recorded it as still applying (status.InPlane); a failure, a wait
// for a window or work held back for one records its own outcome instead.
func (t *tenantRun) planeDone(err error) {
	if err != nil || !t.inPlane || len(t.win.waits) > 0 {
		return
	}
	rev, gen := t.job.run.snap.Revision, t.generation
	werr := t.r.recordOutcome(t.name, t.desired, gen, func(schema.TenantStatus) status.Outcome {
		return status.Applied(rev, gen)
	})
	if werr != nil {
		t.r.log.Error("record tenant status", "tenant", t.name, "err", werr)
	}
}

// planeActions is the run's record of what the Talos plane did, in its
// result.
func (t *tenantRun) planeActions() *schema.PlaneActions {
	if t.res.Plane == nil {
		t.res.Plane = &schema.PlaneActions{}
	}
	return t.res.Plane
}

// machineName names one of the run's machines as people know it: its
// host name, else its id.
func (t *tenantRun) machineName(id string) string {
	for _, m := range t.machines {
		if m.Metadata.Name == id && m.Spec.Hostname != "" {
			return m.Spec.Hostname
		}
	}
	return id
}

// talosError classifies an error of the plane: a rollout that stopped at
// a failed machine waits for a new commit; a rollout paused for a closed
// maintenance window waits for it (windowWait); waiting for machines or
// etcd, and anything else, is retried.
func talosError(err error) error {
	var stopped *talos.StoppedError
	var waiting *talos.WaitingError
	var suspended *talos.SuspendedError
	var wait *window.WaitError
	var superseded *talos.SupersededError
	switch {
	case err == nil || errors.As(err, &suspended):
		return nil // a suspended tenant's rollout resumes when it is resumed
	case errors.As(err, &superseded):
		return err // conclude records it; the newer revision runs next
	case errors.As(err, &wait):
		return windowWait(wait)
	case errors.As(err, &stopped) && stopped.Cause != "":
		return stall(stopped.Cause, err)
	case errors.As(err, &stopped):
		return stall(schema.ReasonRolloutFailed, err)
	case errors.As(err, &waiting) && waiting.Cause != "":
		return retry(waiting.Cause, err)
	case errors.As(err, &waiting):
		return retry(schema.ReasonWaitingForMachines, err)
	}
	return retry(schema.ReasonFailed, err)
}

// TalosBundle returns a tenant's secrets bundle for the plane's probes:
// from memory, else from its stored state, decrypted in memory with
// Options.StatePassphrase when it is encrypted (so that machine status
// comes back at once after a restart, before any run). It returns nil
// when neither has it.
func (r *Reconciler) TalosBundle(tenant string) []byte {
	return storedBundle(r.store, &r.secrets, r.opts.StatePassphrase, r.log, tenant)
}

// StoredBundles reads tenants' secrets bundles for an observer that runs
// without a reconciler (a replica that does not lead, which observes the
// machines of the tenants it owns): from its memory, else from the
// tenant's stored state, as TalosBundle does. A bundle is made once for a
// tenant and stays for its life, so what was read is kept; Forget drops
// it, for a tenant that went away.
type StoredBundles struct {
	store      store.Store
	passphrase string
	log        *slog.Logger
	cache      secretsCache
}

// NewStoredBundles returns a reader of the bundles in st's states;
// passphrase decrypts encrypted states ("" when they are not encrypted).
func NewStoredBundles(st store.Store, passphrase string, log *slog.Logger) *StoredBundles {
	return &StoredBundles{store: st, passphrase: passphrase, log: log}
}

// Bundle returns the tenant's bundle, or nil when its state has none
// (yet) or cannot be read.
func (b *StoredBundles) Bundle(tenant string) []byte {
	return storedBundle(b.store, &b.cache, b.passphrase, b.log, tenant)
}

// Forget drops what was read of the tenant's bundle.
func (b *StoredBundles) Forget(tenant string) { b.cache.put(tenant, nil) }

// storedBundle is the tenant's bundle from cache, else from its stored
// state, which it then caches.
func storedBundle(st store.Store, cache *secretsCache, passphrase string, log *slog.Logger, tenant string) []byte {
	if b := cache.get(tenant); b != nil {
		return b
	}
	var raw []byte
	_ = st.View(func(tx store.Tx) error {
		raw = append([]byte(nil), store.CurrentState(tx, tenant)...)
		return nil
	})
	if len(raw) == 0 || cache.missed(tenant, raw) {
		return nil
	}
	b, encrypted, err := secretsFromStateFile(raw)
	if err == nil && encrypted && passphrase != "" {
		var plain []byte
		if plain, err = decryptState(raw, passphrase); err == nil {
			b, _, err = secretsFromStateFile(plain)
		}
	}
	if err != nil || b == nil {
		if err != nil {
			log.Debug("secrets of a tenant from its stored state", "tenant", tenant, "err", err)
		}
		cache.miss(tenant, raw)
		return nil
	}
	cache.put(tenant, b)
	return b
}
