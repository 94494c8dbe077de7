// Package reconciler runs the loop that turns a snapshot of the repository
// into applied infrastructure and running machines.
//
// # The loop
//
// The loop is lists of named steps (steps.go), each run in order until one
// stops it:
//
//   - revisionSteps handle a revision as a whole (commit.go): record that
//     it was seen, verify its signature, check that it descends from the
//     last applied revision, load and validate every manifest, note the
//     suspended tenants, guard deletions, order the tenants and queue a
//     run for each tenant the revision changes. A revision that changes
//     nothing a tenant sees ends here, without tofu (unchanged.go).
//   - applySteps bring one tenant to the revision (tenant.go): prepare,
//     refuse provider classes the server does not run, hold a suspended
//     tenant or one outside its maintenance window, render, write the
//     workspace, apply with tofu, project the TF state into Machines,
//     configure bare-metal machines, record the result (Finish), then
//     bootstrap etcd and roll the change through the machines (plane.go).
//   - destroySteps remove a tenant that left git, and startupSteps clear
//     what a server that died left behind (recover.go).
//
// Beside the loop: drift checks (drift.go) and previews of other refs
// (preview.go) have workers of their own, and the queue (queue.go) runs
// tenants in parallel, each tenant's runs one after the other, retrying
// with backoff. Among replicas (Options.Owners), a tenant's run happens on
// the replica that owns it: the leader hands it over as it leaves the
// queue, without waiting for a worker of its own, and records the result
// it gets back (remote.go).
//
// # Errors
//
// A step returns nil, a *StalledError (only a new commit helps: invalid
// manifests, a deletion guard, a provider class the server does not run)
// or a *RetryError (it may pass: a state lock held elsewhere, tofu or a
// cloud failing, a maintenance window that is closed); errors.go says how
// each is classified. Each carries a reason of package schema, which the
// tenant's conditions and the commit's result show.
//
// # Rooms
//
//   - reconciler/tofu runs tofu (the runner, its output, the state
//     backend's client);
//   - reconciler/talos is the Talos plane: bootstrap, rollouts, the
//     observer, the pool of connections to the machines;
//   - reconciler/status owns the status and conditions of tenants, node
//     groups, machines and commits: every write of them goes through its
//     Recorder (internal/layering's TestStatusOwner holds that);
//   - reconciler/report sends each commit's result to the forge.
//
// Records the loop keeps (applied.go, commitrecord.go, storekeys.go) live
// in the store, through package store's interface.
//
// The package must not import backend (the API calls the reconciler
// through small interfaces that backend declares and cmd/rezuscloud wires)
// nor cmd; internal/layering's TestImportRules holds that.
package reconciler
