// Package events owns deriving the notifications' events (notify.Event)
// from what the server records: it follows the store's committed changes
// (store.Store.OnCommit) to tenants, machines and commits, keeps per
// tenant and per machine the last state it saw, compares each change with
// it, and hands what happened to a notify.Sink:
//
//   - a tenant's conditions and status, as reconciler/status records
//     them: ReconcileFailed and Recovered, Stalled, Drifted and
//     DriftResolved, RolloutStarted, RolloutSucceeded and RolloutFailed,
//     BackupFailed and BackupRecovered;
//   - the commit records: CommitRefused (invalid, unsigned, not a fast
//     forward, over the deletion guard), BootstrapDone, and the revision
//     each tenant last attempted, which its events name;
//   - the machines' observed status: MachineNotReady, once per episode,
//     for a machine not ready for longer than a threshold, on a clock that
//     tests inject;
//   - the replicas' membership (WatchMembers): ReplicaLost.
//
// The state it compares with is loaded from the store when Run starts, so
// that a restart does not send again what the store already showed. The
// store's hook only queues the changes; Run derives the events in its own
// goroutine, so that a commit never waits for a notification. Only the
// server that does the work (the leading replica) runs it, so that several
// replicas send each event once.
//
// It reads the store and schema only: it must not import the reconciler
// (reconciler/status included) or backend, and it never writes to the
// store.
package events
