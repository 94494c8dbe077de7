package reconciler

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"github.com/rezuscloud/rezuscloud/reconciler/talos"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// tenantJob applies (desired set) or destroys (desired nil) one tenant for
// one revision; attempt counts the retries before it (0 for the
// revision's own run).
type tenantJob struct {
	run     *CommitRun
	tenant  string
	desired *schema.TenantDesired
	inHash  string // inputHash of desired, "" when not known yet
	attempt int
	// correct: the run applies the revision again although it is the one
	// applied, to correct drift (see drift.go).
	correct bool
	// held is this replica's hold on the tenant's shard while the job
	// runs here (see remote.go); nil without Options.Owners.
	held *heldShard

	// newer is closed once a job of another revision is queued for the
	// tenant while this one runs (Preempt): the plane's drains stop then.
	mu        sync.Mutex
	newer     chan struct{} // made when first asked for
	preempted bool
	elsewhere bool // the job runs on the replica that owns the tenant
}

// newerRevision is closed once a job of another revision is queued for
// the tenant behind j.
func (j *tenantJob) newerRevision() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.newer == nil {
		j.newer = make(chan struct{})
		if j.preempted {
			close(j.newer)
		}
	}
	return j.newer
}

// Preempt is told of a job queued for the tenant while j runs: one of
// another revision closes j's newerRevision, on the replica that runs j
// too. A retry or a drift correction of the same revision does not.
func (j *tenantJob) Preempt(by Job) {
	b, ok := by.(*tenantJob)
	if !ok || b.run.snap.Revision == j.run.snap.Revision {
		return
	}
	if j.preempt() && j.isElsewhere() {
		go j.preemptElsewhere(b.run.snap.Revision)
	}
}

// preempt closes j's newerRevision, and reports whether it was open.
func (j *tenantJob) preempt() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.preempted {
		return false
	}
	j.preempted = true
	if j.newer != nil {
		close(j.newer)
	}
	return true
}

// Run runs the job here, or on the replica that owns the tenant when
// another does (see remote.go).
func (j *tenantJob) Run(ctx context.Context) {
	if j.run.r.opts.Owners != nil && j.held == nil && j.run.deliver == nil {
		j.runElsewhere(ctx)
		return
	}
	j.runHere(ctx)
}

// runHere runs applySteps or destroySteps, and then concludes: the
// deferred status write of the tenant.
func (j *tenantJob) runHere(ctx context.Context) {
	ctx, end := j.inShard(ctx)
	defer end()
	t := &tenantRun{r: j.run.r, job: j, name: j.tenant, desired: j.desired,
		res: &schema.TenantResult{Tenant: j.tenant, StartedAt: j.run.r.opts.Now()}}
	steps := applySteps
	if j.desired == nil {
		steps = destroySteps
	}
	var err error
	defer func() { t.conclude(err) }()
	_, err = runSteps(ctx, t, steps)
}

// Superseded records that a newer revision reached the tenant before this
// job ran.
func (j *tenantJob) Superseded(by Job) {
	j.letGo()
	if j.run.deliver != nil && by == nil {
		j.run.deliver(nil) // this replica stops: the leader sends the run elsewhere
		return
	}
	if j.attempt > 0 && j.run.deliver == nil {
		j.run.retrySuperseded(j.tenant, by)
		return
	}
	msg := "superseded before it ran"
	if b, ok := by.(*tenantJob); ok {
		msg = "superseded by revision " + b.run.snap.Revision + " before it ran"
	}
	j.run.record(&schema.TenantResult{Tenant: j.tenant, Phase: schema.CommitSuperseded, Error: msg}, false)
}

// tenantRun is the state of one run of applySteps or destroySteps: what
// each step found, for the steps after it.
type tenantRun struct {
	r       *Reconciler
	job     *tenantJob
	name    string
	desired *schema.TenantDesired // nil when the tenant is destroyed
	res     *schema.TenantResult

	prev       *appliedRecord // what was last applied; nil for a new tenant
	inHash     string
	generation int64
	model      modeldiff.Model // the desired one
	rewrite    bool            // the state is plain but must be encrypted
	again      bool            // tofu runs even if nothing changed

	dir    string
	creds  tofu.Creds
	revoke func()
	bundle []byte
	fresh  bool // the secrets bundle was made for this run
	ws     *render.Workspace
	vars   []byte
	notes  string // what the run says before tofu's output

	out      *tofu.Result
	machines []*schema.Machine
	inPlane  bool        // the Talos plane's steps work on the machines Finish recorded (plane.go)
	win      windowState // what the MaintenanceWindow step found (window.go)
	metalErr error       // bare-metal machines ConfigureMetal did not reach (metal.go)
	// removed are the machines the applied plan removed after their Nodes
	// were drained (drainCheck); their Nodes are deleted after the apply.
	removed []talos.Machine

	// release gives the tenant's work directory back to drift checks
	// (see driftState.hold); Settle takes it.
	release func()
}

// prepare reads what was last applied to the tenant and works out whether
// tofu must run even when nothing changed: after an interrupted run, or to
// encrypt a state written before encryption was on.
func (t *tenantRun) prepare(context.Context) (stepResult, error) {
	r := t.r
	prev, err := r.appliedRecord(t.name)
	if err != nil {
		t.job.run.started(t.name)
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	t.prev = prev
	if t.desired == nil {
		if t.job.attempt == 0 {
			t.job.run.started(t.name)
		}
		if prev == nil {
			return stepDone, nil // never applied: nothing to destroy
		}
		t.generation = prev.Generation
		return stepNext, nil
	}
	t.inHash = t.job.inHash
	if t.inHash == "" {
		t.inHash = inputHash(t.desired, r.opts.HashKey)
	}
	t.model = modeldiff.DesiredModel(t.desired.Redacted())
	t.generation = 1
	if prev != nil {
		t.generation = prev.Generation
		if prev.InputHash != t.inHash {
			t.generation++
		}
	}
	if t.job.attempt == 0 {
		t.job.run.started(t.name)
	}
	t.rewrite = r.opts.EncryptState && prev != nil && r.plainState(t.name)
	t.again = t.rewrite || r.needsRecovery(t.name) || t.job.correct
	return stepNext, nil
}

// unchanged reports whether the applied model is the desired one.
func (t *tenantRun) unchanged() bool {
	return !t.again && t.prev != nil && len(modeldiff.Diff(t.prev.Model, t.model)) == 0
}

// quickCheck ends a run whose manifests are the ones last applied without
// tofu: labels, annotations and the observed commit may still change.
func (t *tenantRun) quickCheck(context.Context) (stepResult, error) {
	if !t.unchanged() || t.prev.InputHash != t.inHash {
		return stepNext, nil
	}
	// The Talos plane's work needs the rendered configs.
	if want, err := t.talosWanted(); err != nil || want {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	return stepDone, t.finishUnchanged("", false)
}

// finishUnchanged records the revision as applied to a tenant that needs
// no tofu run, with its machines as stored; inPlane says that the Talos
// plane's steps follow.
func (t *tenantRun) finishUnchanged(renderedHash string, inPlane bool) error {
	machines, err := t.r.storedMachines(t.name)
	if err != nil {
		return retry(schema.ReasonStoreError, err)
	}
	rec := *t.prev
	rec.Revision, rec.Annotations, rec.InputHash, rec.Generation = t.job.run.snap.Revision, t.desired.Tenant.Metadata.Annotations, t.inHash, t.generation
	if renderedHash != "" {
		rec.RenderedHash = renderedHash
	}
	t.inPlane = inPlane
	return retry(schema.ReasonStoreError, t.r.finishTenant(t.desired, &rec, machines, inPlane))
}

// settle readies the work directory: no drift check and no tofu of an
// earlier run is still in it, and no lock of one still holds the state.
// It takes the run's credentials for the state backend.
func (t *tenantRun) settle(ctx context.Context) (stepResult, error) {
	if t.release == nil {
		t.release = t.r.drift.hold(t.name)
	}
	dir, err := t.r.workDir(t.name)
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	t.dir = dir
	if err := t.r.settle(ctx, t.name, dir); err != nil {
		return stepNext, retry(schema.ReasonStateBackendError, err)
	}
	t.creds, t.revoke = t.r.creds(t.name)
	return stepNext, nil
}

// secrets finds the tenant's Talos secrets bundle, or makes one for a
// tenant that has none yet.
func (t *tenantRun) secrets(ctx context.Context) (stepResult, error) {
	var initInputs []byte
	if t.prev != nil {
		initInputs = t.prev.InitInputs
	}
	var err error
	t.bundle, t.fresh, err = t.r.secretsFor(ctx, t.desired, t.dir, initInputs, t.creds)
	t.creds.Secrets = rtalos.SecretValues(t.bundle)
	return stepNext, retry(schema.ReasonStateBackendError, err)
}

// render renders the workspace. A render error comes from the manifests,
// so it stalls. When the workspace is the one applied, the run ends here.
func (t *tenantRun) render(ctx context.Context) (stepResult, error) {
	ws, err := t.r.modules.Render(t.desired, t.bundle)
	if err != nil {
		return stepNext, stall(schema.ReasonInvalidManifests, err)
	}
	t.ws = ws
	if !t.fresh && t.unchanged() && t.prev.RenderedHash == ws.Hash {
		want, err := t.talosWanted()
		if err != nil {
			return stepDone, retry(schema.ReasonStoreError, err)
		}
		if err := t.finishUnchanged(ws.Hash, want); err != nil || !want {
			return stepDone, err
		}
		return stepDone, t.talosUnchanged(ctx)
	}
	return stepNext, nil
}

// writeWorkspace writes the rendered files into the work directory; the
// values of sensitive variables stay in memory until tofu plans.
func (t *tenantRun) writeWorkspace(context.Context) (stepResult, error) {
	vars, err := t.ws.VarFile()
	if err != nil {
		return stepNext, stall(schema.ReasonInvalidManifests, err)
	}
	t.vars = vars
	for fname, b := range t.ws.Files {
		if err := writeFileAtomic(filepath.Join(t.dir, fname), b); err != nil {
			return stepNext, retryf(schema.ReasonStoreError, "write workspace: %v", err)
		}
	}
	return stepNext, nil
}

// markApplying shows in the tenant's status that tofu runs for it; a new
// tenant appears, forming, while its first apply runs.
func (t *tenantRun) markApplying(context.Context) (stepResult, error) {
	rev, gen := t.job.run.snap.Revision, t.generation
	return stepNext, retry(schema.ReasonStoreError, t.r.recordOutcome(t.name, t.desired, gen, func(schema.TenantStatus) status.Outcome {
		return status.Applying(rev, gen)
	}))
}

// pushErrored pushes the state that an interrupted apply saved in
// errored.tfstate before tofu runs (see Runner.PushErrored).
func (t *tenantRun) pushErrored(ctx context.Context) (stepResult, error) {
	note, err := t.r.runner.PushErrored(ctx, t.dir, t.creds)
	t.notes += note
	return stepNext, retry(schema.ReasonStateBackendError, err)
}

// apply runs tofu: plan, and apply the plan when it changes anything.
func (t *tenantRun) apply(ctx context.Context) (stepResult, error) {
	check := t.drainCheck(ctx, t.snapshotCheck(ctx, t.windowCheck(replaceCheck(t.desired, t.job.run.snap.Trailers))))
	apply := func(ctx context.Context, dir string, initInputs, vars []byte, creds tofu.Creds) (*tofu.Result, error) {
		return t.r.runner.ApplyChecked(ctx, dir, initInputs, vars, creds, check)
	}
	if t.rewrite {
		apply = t.r.runner.Rewrite
	}
	out, err := apply(ctx, t.dir, t.ws.InitInputs, t.vars, t.creds)
	t.output(out)
	if err != nil {
		return stepNext, tofuError(err)
	}
	if kept := secretsFromShow(out.State); kept != nil {
		t.r.secrets.put(t.name, kept)
	}
	t.deleteRemovedNodes(ctx)
	return stepNext, nil
}

// output keeps the plan and the output tail of a tofu run in the result,
// redacted (the runner redacts its output; this holds for the notes too),
// and without the tenant's decrypted values.
func (t *tenantRun) output(out *tofu.Result) {
	if out != nil {
		t.res.Plan = t.r.withMachines(out.Plan, out.Changes)
		t.res.OutputTail = scrubber(t.desired)(t.notes + out.Output)
	}
	t.out = out
}

// project turns the state into the tenant's machines.
func (t *tenantRun) project(context.Context) (stepResult, error) {
	machines, err := t.r.project(t.name, t.out.State)
	if err != nil {
		return stepNext, retryf(schema.ReasonFailed, "project state: %v", err)
	}
	t.machines = machines
	return stepNext, nil
}

// finish records what the run applied: the tenant, its node groups,
// patches and machines, and the applied record; the tenant stays
// Reconciling when the Talos plane has machines to work on next.
func (t *tenantRun) finish(context.Context) (stepResult, error) {
	td := t.desired.Redacted()
	rec := &appliedRecord{
		Tenant: t.name, Revision: t.job.run.snap.Revision, Generation: t.generation,
		InputHash: t.inHash, RenderedHash: t.ws.Hash, InitInputs: t.ws.InitInputs,
		Annotations: td.Tenant.Metadata.Annotations,
		Model:       modeldiff.AppliedModel(td.Tenant, td.NodeGroups, td.Patches, t.machines),
	}
	t.inPlane = t.planeWorks()
	return stepNext, retry(schema.ReasonStoreError, t.r.finishTenant(t.desired, rec, t.machines, t.inPlane))
}

// markDeleting gives a tenant that left git its deletionTimestamp and
// finalizers, and the phase removing.
func (t *tenantRun) markDeleting(context.Context) (stepResult, error) {
	return stepNext, retry(schema.ReasonStoreError, t.r.markDeleting(t.name, t.generation))
}

// destroy runs tofu destroy on what the tenant's state holds, but the
// secrets resource of earlier versions (formerSecretsKept).
func (t *tenantRun) destroy(ctx context.Context) (stepResult, error) {
	vars, err := placeholderVars(t.dir)
	if err != nil {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	out, err := t.r.runner.Destroy(ctx, t.dir, t.prev.InitInputs, vars, t.creds, t.r.formerSecretsKept(t.name)...)
	t.output(out)
	if err != nil {
		return stepNext, tofuError(err)
	}
	return stepNext, nil
}

// remove drops the destroyed tenant's records, state and work directory.
func (t *tenantRun) remove(ctx context.Context) (stepResult, error) {
	if err := t.r.removeTenant(ctx, t.name, t.creds); err != nil {
		return stepNext, retry(schema.ReasonStateBackendError, err)
	}
	_ = os.RemoveAll(t.dir)
	t.r.secrets.put(t.name, nil)
	if pl := t.r.opts.Talos; pl != nil {
		if err := pl.Forget(t.name); err != nil {
			return stepNext, retry(schema.ReasonStoreError, err)
		}
	}
	return stepNext, nil
}

// conclude is the deferred status write of a tenant's run: the result,
// the tenant's status on a failure (a success wrote it in Finish), a retry
// when the failure may pass, the metrics, and the commit's record.
func (t *tenantRun) conclude(err error) {
	r, res := t.r, t.res
	if t.revoke != nil {
		t.revoke()
	}
	if t.release != nil {
		t.release()
	}
	t.planeDone(err)
	err = t.waitForWindow(err)
	res.FinishedAt = r.opts.Now()
	res.Phase = schema.CommitSucceeded
	var superseded *talos.SupersededError
	switch {
	case errors.As(err, &superseded):
		// The newer revision's run, queued already, records the
		// tenant's status.
		res.Phase, res.Reason, res.Error = schema.CommitSuperseded, schema.ReasonSuperseded, err.Error()
	case err != nil:
		t.failed(err)
	}
	result := "succeeded"
	switch {
	case res.Phase == schema.CommitSuperseded:
		result = "superseded"
	case res.Phase == schema.CommitFailed:
		result = "failed"
	case res.OutputTail == "":
		result = "unchanged"
	}
	r.opts.Metrics.Reconciled(result, res.FinishedAt.Sub(res.StartedAt).Seconds())
	if res.Phase == schema.CommitSucceeded && res.Reason != schema.ReasonSuspended {
		rev := ""
		if t.desired != nil {
			rev = t.job.run.snap.Revision
		}
		r.opts.Metrics.Applied(t.name, rev)
		if t.job.run.deliver == nil { // the leader's drift checks follow a run it handed over
			r.drift.remember(t.name, t.job.run, t.desired, t.ws)
		}
	}
	t.job.run.record(res, t.job.attempt > 0)
}

// failed records a failed run in its result and the tenant's status, and
// schedules its retry unless it stalled.
func (t *tenantRun) failed(err error) {
	r, res := t.r, t.res
	stalled, reason := classify(err)
	res.Phase, res.Error, res.Reason, res.Stalled = schema.CommitFailed, scrubber(t.desired)(err.Error()), reason, stalled
	msg := res.Error
	if t.desired == nil {
		msg = "destroy failed: " + msg
	}
	var next *schema.RetryStatus
	werr := r.recordOutcome(t.name, t.desired, t.generation, func(stored schema.TenantStatus) status.Outcome {
		if stalled {
			return status.Stalled(reason, msg, t.generation)
		}
		n := r.backoff.Next(stored.Retry, reason, r.opts.Now())
		next = &n
		return status.Retrying(reason, msg, n, t.generation)
	})
	if werr != nil {
		r.log.Error("record tenant status", "tenant", t.name, "err", werr)
	}
	if stalled {
		return
	}
	if next == nil { // no record of the tenant to count in: count in the job
		n := r.backoff.Next(&schema.RetryStatus{Attempts: t.job.attempt}, reason, r.opts.Now())
		next = &n
	}
	job := &tenantJob{run: t.job.run, tenant: t.name, desired: t.desired, inHash: t.inHash, attempt: next.Attempts, correct: t.job.correct}
	if t.job.run.retryLater(job, next.NextAttemptAt.Sub(r.opts.Now())) {
		res.NextAttemptAt = next.NextAttemptAt
		r.opts.Metrics.Retried(t.name, reason)
		r.log.Info("tenant run failed; retrying", "tenant", t.name, "reason", reason, "attempt", next.Attempts,
			"next_attempt_at", next.NextAttemptAt, "err", res.Error)
	}
}
