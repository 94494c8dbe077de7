package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Drift detection. Every Options.DriftInterval (jittered, so that tenants
// spread out), each applied tenant gets a drift check: a refresh-only plan
// in its work directory, with the workspace, credentials and state lock of
// an apply, and a look at the Talos plane's observations of its machines.
// Checks run on a queue of their own (Options.DriftWorkers), so they never
// take an apply's or a preview's worker. A tenant's check and the part of
// its runs that uses the work directory (from Settle on) exclude each
// other (driftState.hold): a run that gets there during a check cancels it
// and waits only for its tofu to stop, and a scheduled check skips a
// tenant whose run is pending or in progress.
//
// A check records its finding in the tenant's Drifted condition (a store
// write, so an event on the watch stream, only when it changes), in the
// gauge rezuscloud_tenant_drifted, in a log line and, through
// Options.OnDrift, in a commit status. Under the drift policy "correct"
// (schema.AnnotationDriftPolicy) a drifted tenant's last applied revision
// runs again through applySteps, whose replace guard holds as for any run.

// Defaults of drift detection.
const (
	// DefaultDriftInterval is the serve flag's default; Options.DriftInterval
	// 0 turns drift checks off.
	DefaultDriftInterval = time.Hour
	// DefaultDriftWorkers is how many drift checks run at once.
	DefaultDriftWorkers = 1
)

// DriftReport is what one drift check found that changed a tenant's
// Drifted condition; Options.OnDrift gets it.
type DriftReport struct {
	Tenant string
	// Revision is the revision applied to the tenant, whose commit the
	// report is about.
	Revision string
	Drifted  bool
	Message  string
}

// driftState is the reconciler's part of drift detection: the checks'
// queue, the tenants' exclusion locks, and what each tenant had applied.
type driftState struct {
	r     *Reconciler
	queue *Queue

	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	cancels map[string]context.CancelFunc // of the check that runs, by tenant
	applied map[string]appliedRun
	next    map[string]time.Time
	fixed   map[string]string // the drift last corrected, by tenant

	stop context.CancelFunc
	done chan struct{}
}

// appliedRun is the run that last applied a tenant, its manifests and,
// once rendered, its workspace (kept in memory only, as the secrets cache
// keeps the bundle it holds), so that a check does not render it again.
type appliedRun struct {
	run     *CommitRun
	desired *schema.TenantDesired
	ws      *render.Workspace
	// inHash, for a quiet tenant (see unchanged.go), is the hash of its
	// manifests, which are the applied ones although run is of a later
	// revision than the one that applied them.
	inHash string
}

func newDriftState(r *Reconciler) *driftState {
	workers := r.opts.DriftWorkers
	if workers <= 0 {
		workers = DefaultDriftWorkers
	}
	d := &driftState{r: r, queue: NewQueue(QueueOptions{Workers: workers, Grace: min(time.Minute, r.opts.ShutdownGrace)}),
		locks: map[string]*sync.Mutex{}, cancels: map[string]context.CancelFunc{}, applied: map[string]appliedRun{}, next: map[string]time.Time{}, fixed: map[string]string{}, done: make(chan struct{})}
	d.queue.Start()
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	if r.opts.DriftInterval <= 0 {
		close(d.done)
		return d
	}
	go d.loop(ctx, r.opts.DriftInterval)
	return d
}

// close stops scheduling checks and waits for the running ones.
func (d *driftState) close() {
	d.stop()
	<-d.done
	d.queue.Stop()
}

// hold takes the tenant's exclusion lock for a run of the tenant and
// returns its release: from Settle on, a run has the work directory to
// itself. A check of the tenant under way is cancelled (its tofu gets
// SIGINT, stops and releases the state lock), so that the run waits for
// no more than that.
func (d *driftState) hold(tenant string) func() {
	l := d.lock(tenant)
	d.mu.Lock()
	cancel := d.cancels[tenant]
	d.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	l.Lock()
	return l.Unlock
}

func (d *driftState) lock(tenant string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.locks[tenant]
	if l == nil {
		l = &sync.Mutex{}
		d.locks[tenant] = l
	}
	return l
}

// remember records the run that applied a tenant (desired nil: the tenant
// was destroyed) and the workspace it rendered (nil when it rendered
// none), for the checks and corrections that follow.
func (d *driftState) remember(tenant string, run *CommitRun, desired *schema.TenantDesired, ws *render.Workspace) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if desired == nil {
		delete(d.applied, tenant)
		delete(d.next, tenant)
		d.r.opts.Metrics.Drifted(tenant, -1)
		return
	}
	d.applied[tenant] = appliedRun{run: run, desired: desired, ws: ws}
}

// rememberQuiet records the run of a revision that left a quiet tenant as
// it was (its manifests hash to inHash, the applied ones), unless a run
// of this process applied it: after a restart, that is how the applied
// tenants come under the checks without a run of their own.
func (d *driftState) rememberQuiet(tenant string, run *CommitRun, desired *schema.TenantDesired, inHash string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.applied[tenant]; !ok {
		d.applied[tenant] = appliedRun{run: run, desired: desired, inHash: inHash}
	}
}

// rendered keeps the workspace a check rendered for the run that applied
// tenant, unless another run has applied it since.
func (d *driftState) rendered(tenant string, run *CommitRun, ws *render.Workspace) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ap, ok := d.applied[tenant]; ok && ap.run == run {
		ap.ws = ws
		d.applied[tenant] = ap
	}
}

// corrected records msg as the drift of tenant that a correction was
// queued for ("" forgets it), and reports whether msg was recorded
// already.
func (d *driftState) corrected(tenant, msg string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if msg == "" {
		delete(d.fixed, tenant)
		return false
	}
	seen := d.fixed[tenant] == msg
	d.fixed[tenant] = msg
	return seen
}

// loop queues each applied tenant's check when it is due: the first at a
// random point of the second half of the first interval (so that a server
// that just started applies before it checks), each later one an interval
// after the last, less up to a tenth of it.
func (d *driftState) loop(ctx context.Context, interval time.Duration) {
	defer close(d.done)
	tick := min(max(interval/8, 10*time.Millisecond), 10*time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		d.mu.Lock()
		for name := range d.applied {
			next, ok := d.next[name]
			switch {
			case !ok:
				d.next[name] = now.Add(interval/2 + rand.N(interval/2+1))
			case !now.Before(next):
				d.next[name] = now.Add(interval - rand.N(interval/10+1))
				d.queue.Enqueue(name, &driftJob{d: d, tenant: name})
			}
		}
		d.mu.Unlock()
	}
}

// driftJob is one drift check on the drift queue. A scheduled one (wait
// false) skips a tenant that is busy; done, when set, is called once the
// check ran or was superseded. Among replicas, a check of a tenant that
// another replica owns goes to that one (remotework.go).
type driftJob struct {
	d      *driftState
	tenant string
	wait   bool
	done   func(error)

	// held is the tenant's shard, held by this replica for the check.
	held *heldShard
	// given is what the leader says was applied, for a check it handed
	// to this replica; askCorrect is then set when the drift found
	// should be corrected, which the leader queues.
	given      *appliedRun
	askCorrect bool
}

func (j *driftJob) Run(ctx context.Context) {
	var err error
	switch {
	case j.d.r.opts.Owners == nil || j.held != nil:
		err = j.check(ctx)
	case j.given != nil:
		err = ErrNotOwner // the tenant moved while its check waited here
	default:
		err = j.checkElsewhere(ctx)
	}
	if j.done != nil {
		j.done(err)
	}
}

func (j *driftJob) Superseded(by Job) {
	if j.done == nil {
		return
	}
	if by == nil && j.given != nil {
		j.done(errOwnerStopped)
		return
	}
	j.done(nil)
}

// DriftCheck runs a drift check of tenant now, on the drift queue, and
// waits for it; a run of the tenant in progress finishes first, and one
// that starts meanwhile cancels the check (which then returns nil, and
// records nothing). It returns the check's error, or ctx's.
func (r *Reconciler) DriftCheck(ctx context.Context, tenant string) error {
	ch := make(chan error, 1)
	r.drift.queue.Enqueue(tenant, &driftJob{d: r.drift, tenant: tenant, wait: true, done: func(err error) { ch <- err }})
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DriftSweep checks every applied tenant once, on the drift queue, and
// waits until all are done; it returns the errors of the checks that
// failed, joined.
func (r *Reconciler) DriftSweep(ctx context.Context) error {
	r.drift.mu.Lock()
	names := make([]string, 0, len(r.drift.applied))
	for name := range r.drift.applied {
		names = append(names, name)
	}
	r.drift.mu.Unlock()
	slices.Sort(names)
	ch := make(chan error, len(names))
	for _, name := range names {
		r.drift.queue.Enqueue(name, &driftJob{d: r.drift, tenant: name, wait: true, done: func(err error) { ch <- err }})
	}
	var errs []error
	for range names {
		select {
		case err := <-ch:
			errs = append(errs, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// yield waits until no run of any tenant is in progress, so that a check
// does not share the machine with an apply; a check that runs already
// when an apply starts goes on. Checks wait for as long as runs follow
// each other.
func (d *driftState) yield(ctx context.Context) error {
	for d.r.queue.Running() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// driftRun is one drift check of a tenant: the parts of a tenant run that
// prepare a plan, and what the check found.
type driftRun struct {
	*tenantRun
	applied   appliedRun
	found     *tofu.Drift
	talos     []string // machines whose running config is not the rendered one
	unchecked bool     // nothing to check: the workspace is not the applied one
	// given: the leader handed the check over; a correction is then
	// asked of it (askCorrect) rather than queued here.
	given, askCorrect bool
}

// driftSteps check one tenant (see driftJob.check): its work directory, its
// secrets and workspace as an apply has them, the refresh-only plan and
// the Talos plane's observations.
var driftSteps = []step[*driftRun]{
	{"ProviderClasses", (*driftRun).classesRun},
	{"Settle", (*driftRun).settle},
	{"Secrets", (*driftRun).secretsApplied},
	{"Render", (*driftRun).renderApplied},
	{"WriteWorkspace", (*driftRun).writeWorkspace},
	{"RefreshPlan", (*driftRun).refreshPlan},
	{"TalosConfig", (*driftRun).talosConfig},
}

// check checks the job's tenant and records what it found. With wait
// false a tenant whose run is pending or in progress is skipped; with
// wait true the check waits for the run in progress.
func (j *driftJob) check(parent context.Context) error {
	r, tenant := j.d.r, j.tenant
	ctx, end := j.inShard(parent)
	defer end()
	l := r.drift.lock(tenant)
	if j.wait {
		l.Lock()
	} else if !l.TryLock() {
		return nil
	}
	defer l.Unlock()
	if !j.wait && r.queue.busy(tenant) {
		return nil
	}
	if r.suspended(tenant) {
		// Nothing runs for a suspended tenant, not even a refresh under
		// its state lock: its operators may be working on it by hand.
		return nil
	}
	if err := r.drift.yield(ctx); err != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.drift.mu.Lock()
	ap, ok := r.drift.applied[tenant]
	r.drift.cancels[tenant] = cancel
	r.drift.mu.Unlock()
	if j.given != nil {
		ap, ok = *j.given, true
	}
	defer func() {
		r.drift.mu.Lock()
		delete(r.drift.cancels, tenant)
		r.drift.mu.Unlock()
	}()
	prev, err := r.appliedRecord(tenant)
	if err != nil {
		return fmt.Errorf("drift check %s: %w", tenant, err)
	}
	if !ok || prev == nil || (prev.Revision != ap.run.snap.Revision && (ap.inHash == "" || ap.inHash != prev.InputHash)) {
		return nil // not applied, or applied by a run this process has not seen
	}
	// release: the check holds the tenant's lock already, Settle must not
	// take it again.
	d := &driftRun{applied: ap, given: j.given != nil, tenantRun: &tenantRun{r: r, name: tenant, desired: ap.desired, prev: prev, release: func() {},
		job: &tenantJob{run: ap.run, tenant: tenant, desired: ap.desired}, res: &schema.TenantResult{Tenant: tenant}}}
	defer func() {
		if d.revoke != nil {
			d.revoke()
		}
	}()
	if step, err := runSteps(ctx, d, driftSteps); err != nil {
		if ctx.Err() != nil && parent.Err() == nil { // cancelled by hold
			r.log.Info("drift check gave way to a run of the tenant", "tenant", tenant, "step", step)
			return nil
		}
		r.log.Warn("drift check failed", "tenant", tenant, "step", step, "err", err)
		return fmt.Errorf("drift check %s: %s: %w", tenant, step, err)
	}
	if d.unchecked {
		return nil
	}
	err = d.record()
	j.askCorrect = d.askCorrect
	return err
}

// inShard returns ctx, ended also when the shard the check holds is
// handed over or its replica fences itself, and the function that ends
// it and lets the shard go.
func (j *driftJob) inShard(ctx context.Context) (context.Context, func()) {
	h := j.held
	if h == nil {
		return ctx, func() {}
	}
	j.held = nil
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
		h.done()
	}
}

// secretsApplied finds the tenant's secrets bundle, unless the workspace
// that needs it is rendered already.
func (d *driftRun) secretsApplied(ctx context.Context) (stepResult, error) {
	if ws := d.applied.ws; ws != nil && ws.Hash == d.prev.RenderedHash {
		return stepNext, nil
	}
	return d.secrets(ctx)
}

// renderApplied renders the applied manifests, once per applied run; a
// workspace other than the one applied (which a newer revision's run will
// apply) is not checked.
func (d *driftRun) renderApplied(ctx context.Context) (stepResult, error) {
	if ws := d.applied.ws; ws != nil && ws.Hash == d.prev.RenderedHash {
		d.ws = ws
		return stepNext, nil
	}
	ws, err := d.r.modules.Render(d.desired, d.bundle)
	if err != nil {
		return stepNext, err
	}
	if ws.Hash != d.prev.RenderedHash {
		d.unchecked = true
		return stepDone, nil
	}
	d.ws = ws
	d.r.drift.rendered(d.name, d.applied.run, ws)
	return stepNext, nil
}

// refreshPlan runs the refresh-only plan.
func (d *driftRun) refreshPlan(ctx context.Context) (stepResult, error) {
	found, err := d.r.runner.RefreshPlan(ctx, d.dir, d.ws.InitInputs, d.vars, d.creds)
	if err != nil {
		return stepNext, tofuError(err)
	}
	d.found = found
	return stepNext, nil
}

// talosConfig finds the machines whose running config is not the one
// rendered for them, as the plane's observer last saw them, unless a
// rollout of the tenant is in progress.
func (d *driftRun) talosConfig(context.Context) (stepResult, error) {
	if d.r.opts.Talos == nil {
		return stepNext, nil
	}
	return stepNext, d.r.store.View(func(tx store.Tx) error {
		tn, err := getJSON[schema.Tenant](tx, schema.KindTenant, d.name)
		if err != nil || tn.Status.Conditions.IsTrue(schema.ConditionUpgrading) {
			return err
		}
		machines, err := store.DecodeTenantObjects[schema.Machine](tx, d.name, schema.KindMachine)
		if err != nil {
			return err
		}
		d.talos = talosDrifted(talos.MachinesOf(machines), machines)
		return nil
	})
}

// talosDrifted names the machines of the plane that answer its probes and
// run a config other than the rendered one.
func talosDrifted(plane []talos.Machine, machines []*schema.Machine) []string {
	onPlane := map[string]bool{}
	for _, m := range plane {
		onPlane[m.ID] = true
	}
	var out []string
	for _, m := range machines {
		if onPlane[m.Metadata.Name] && m.Status.Connected && !m.Status.ConfigUpToDate {
			out = append(out, m.Metadata.Name)
		}
	}
	slices.Sort(out)
	return out
}

// driftMessage says what drifted: resources with the names of their
// changed attributes (never values, which may be secret), and machines
// whose config differs. "" when nothing drifted.
func driftMessage(found []tofu.DriftedResource, machines []string) string {
	var parts []string
	for _, res := range found {
		switch {
		case res.Action == "delete":
			parts = append(parts, res.Address+" was deleted")
		case len(res.Attributes) > 0:
			parts = append(parts, res.Address+" changed: "+strings.Join(res.Attributes, ", "))
		default:
			parts = append(parts, res.Address+" changed")
		}
	}
	if len(machines) > 0 {
		parts = append(parts, "Talos config differs from the rendered one on "+strings.Join(machines, ", "))
	}
	return strings.Join(parts, "; ")
}

// driftNow answers a reconcile request for a drifted tenant with nothing
// pending: a drift check starts now, without waiting for the interval, and
// under the policy "correct" a correction follows it if the drift is
// still there. The request does not wait for the check; its outcome is the
// tenant's Drifted condition.
func (r *Reconciler) driftNow(tenant string) api.ReconcileTenant {
	r.drift.queue.Enqueue(tenant, &driftJob{d: r.drift, tenant: tenant, wait: true})
	r.log.Info("drift check started on request", "tenant", tenant)
	return api.ReconcileTenant{Tenant: tenant, Action: api.ReconcileRunning,
		Message: "the tenant drifted: a drift check runs now; its Drifted condition tells the outcome"}
}

// driftedTenants lists the tenants whose Drifted condition is True.
func (r *Reconciler) driftedTenants() []string {
	var out []string
	_ = r.store.View(func(tx store.Tx) error {
		return tx.Scan(schema.KindTenant, "", func(res store.Resource) error {
			var tn schema.Tenant
			if json.Unmarshal(res.Object, &tn) == nil && tn.Status.Conditions.IsTrue(schema.ConditionDrifted) {
				out = append(out, tn.Metadata.Name)
			}
			return nil
		})
	})
	return out
}
