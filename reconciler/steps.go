package reconciler

import "context"

// The loop is lists of steps. A step is a method of the run it belongs
// to, of one signature:
//
//	func (run *T) name(ctx context.Context) (stepResult, error)
//
// runSteps runs a list in order and stops at the first step that returns
// stepDone or an error (a *StalledError or *RetryError, see errors.go). The
// code that runs a list defers the status write, so that it happens
// whatever step ended the run: CommitRun.submitted for a revision,
// tenantRun.conclude for a tenant.
//
// To add a step, write the method and add its line to the list where it
// belongs; nothing else changes. A step that applies something after the
// machines exist (a Talos bootstrap, a config rollout, an upgrade) goes
// into applySteps after "Project", where tenantRun.machines holds the
// projected machines, tenantRun.desired the manifests and tenantRun.bundle
// the tenant's secrets; it returns a StalledError when only a new commit
// can help, a RetryError when trying again later may, and stepDone when
// the run needs nothing more (then "Finish" does not run, so stepDone is
// for steps that wrote the tenant's records themselves).
// Steps of the Talos plane (plane.go) come after "Finish": "Bootstrap"
// and "Rollout" work inside the machines that Finish recorded.
// A check that must hold before anything runs (a provider class the
// server runs, suspension, a maintenance window) goes into applySteps
// after "Prepare".

// stepResult says whether a run goes on after a step.
type stepResult int

const (
	// stepNext: the next step runs.
	stepNext stepResult = iota
	// stepDone: the run is complete; the remaining steps are skipped.
	stepDone
)

// step is one named part of a run whose state is a T.
type step[T any] struct {
	name string
	run  func(T, context.Context) (stepResult, error)
}

// runSteps runs steps on run in order, until one returns stepDone or an
// error. It returns the name of the step that ended the run ("" when all
// ran) and that step's error.
func runSteps[T any](ctx context.Context, run T, steps []step[T]) (string, error) {
	for _, s := range steps {
		res, err := s.run(run, ctx)
		if err != nil || res == stepDone {
			return s.name, err
		}
	}
	return "", nil
}

// revisionSteps handle one revision as a whole (see commit.go): record
// that it was seen, check its signature (signature.go) and that it
// descends from the last revision applied (ancestry.go), load and validate
// it, note which tenants it suspends (suspend.go), hold back deletions it
// may not make, spread its tenants over the replicas (spread.go), order
// its tenants and queue a run for each.
var revisionSteps = []step[*CommitRun]{
	{"RecordObserved", (*CommitRun).recordObserved},
	{"VerifySignature", (*CommitRun).verifySignature},
	{"CheckAncestry", (*CommitRun).checkAncestry},
	{"Validate", (*CommitRun).validate},
	{"NoteSuspended", (*CommitRun).noteSuspended},
	{"GuardDeletions", (*CommitRun).guardDeletions},
	{"Spread", (*CommitRun).spread},
	{"Order", (*CommitRun).order},
	{"Enqueue", (*CommitRun).enqueue},
}

// applySteps bring one tenant to the manifests of a revision (see
// tenant.go).
var applySteps = []step[*tenantRun]{
	{"Prepare", (*tenantRun).prepare},
	{"VersionSkew", (*tenantRun).versionSkew},
	{"ProviderClasses", (*tenantRun).providerClasses},
	{"Suspend", (*tenantRun).suspend},
	{"RestoreGuard", (*tenantRun).restoreGuard},
	{"MaintenanceWindow", (*tenantRun).maintenanceWindow},
	{"QuickCheck", (*tenantRun).quickCheck},
	{"Settle", (*tenantRun).settle},
	{"RestoreState", (*tenantRun).restoreState},
	{"Secrets", (*tenantRun).secrets},
	{"Render", (*tenantRun).render},
	{"WriteWorkspace", (*tenantRun).writeWorkspace},
	{"MarkApplying", (*tenantRun).markApplying},
	{"PushErroredState", (*tenantRun).pushErrored},
	{"ResetRemovedMetal", (*tenantRun).resetRemovedMetal},
	{"Apply", (*tenantRun).apply},
	{"Project", (*tenantRun).project},
	{"ConfigureMetal", (*tenantRun).configureMetal},
	{"Finish", (*tenantRun).finish},
	{"Bootstrap", (*tenantRun).bootstrap},
	{"Restore", (*tenantRun).restore},
	{"Rollout", (*tenantRun).rollout},
}

// destroySteps remove a tenant that left git (see tenant.go).
var destroySteps = []step[*tenantRun]{
	{"Prepare", (*tenantRun).prepare},
	{"ProviderClasses", (*tenantRun).providerClasses},
	{"Suspend", (*tenantRun).suspend},
	{"MaintenanceWindow", (*tenantRun).maintenanceWindow},
	{"MarkDeleting", (*tenantRun).markDeleting},
	{"Settle", (*tenantRun).settle},
	{"PushErroredState", (*tenantRun).pushErrored},
	{"Destroy", (*tenantRun).destroy},
	{"Remove", (*tenantRun).remove},
}

// startupSteps clear what a server process that died left behind, before
// any run (see Recover in recover.go).
var startupSteps = []step[*Reconciler]{
	{"RemoveUploadPreviews", (*Reconciler).removeUploadPreviews},
	{"RemoveLeftovers", (*Reconciler).removeLeftovers},
	{"ReleaseOwnLocks", (*Reconciler).releaseOwnLocks},
}
