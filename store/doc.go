// Package store owns the server's durable state behind one small
// interface, so that an engine other than the default one can hold it:
//
//   - typed resources: the API objects of schema.Kinds and the
//     reconciler's own records (applied workspaces, drift, suspensions,
//     bootstrap and rollout records…), each a Resource of its kind with
//     the revision (resourceVersion) of its last change. PutObject stamps
//     uid, createdAt, updatedAt and resourceVersion into an API object's
//     metadata, in one place; deletionTimestamp and finalizers are fields
//     of the object like any other.
//   - the tenant index: which objects belong to a tenant, by the one rule
//     of schema.TenantOf (Tx.TenantObjects).
//   - the event log: the latest changes, which a watch resumes from any
//     revision the log still holds (Tx.Events), and ErrGone past its
//     horizon (Tx.EventsFrom).
//   - TF states with their kept versions, the lineage and serial checks a
//     new version must pass (WriteState), and the locks on them with their
//     holders (LockState, UnlockState).
//   - the series area: bytes under keys that take no revision and are
//     never logged (Tx.PutSeries, Tx.Series, Tx.ScanSeries,
//     Tx.DeleteSeries), for data written often that no watch follows,
//     such as package history's chunks.
//   - the copy of one store into another, empty one (Copy), as a move
//     from one engine to another makes it.
//
// # The interface
//
// Store is an open store: View and Update run a function in a
// transaction, OnCommit hooks receive each commit's changes in commit
// order, Close closes it. Tx is one transaction: the resource, event,
// state and lock operations an engine provides. One transaction may span
// any records, a tenant's objects, its records and its state among them;
// it commits whole or not at all.
//
// Every change takes the next revision of one sequence per store: 1 for
// the first, then each the next number, also across restarts; a
// transaction that rolls back takes none. So revisions strictly increase
// and the event log has no gaps. The API calls a revision
// resourceVersion. A Change carries the resource as stored after it (for
// a delete, as it was, with the delete's revision).
//
// The rules every engine shares live here, as functions over Tx, so that
// no engine has its own: the state and lock rules (WriteState,
// RemoveState, LockState, UnlockState, ReleaseLock), the format of a TF
// state (ParseState), and, for engines, the stored value of a resource and
// the stamping of PutObject (StampObject, DeletedObject, DecodeValue).
//
// # Engines
//
// store/bolt is the default engine: one bbolt file in the data dir, for
// one server; it implements Backuper, the consistent copy of the whole
// store that `rezuscloud store backup` takes. Engine-specific operations
// (the bbolt engine's ReleaseMapped, which hands the file's mapped pages
// back to the kernel) stay on the engine's own type. store/storetest is
// the conformance suite every engine passes.
//
// This package must not import backend (nor its subpackages), reconciler,
// render, cmd or sources: the HTTP API and the reconciler are built on it,
// never the other way round.
package store
