// Package bolt is the store's default engine: one bbolt file in the data
// dir (dir 0700, file 0600), for one server. Store and Tx implement
// store.Store and store.Tx; Open opens (and creates, or migrates from an
// older format) the file.
//
// The file's format is "2": resources under resources/KIND/KEY as the
// stored values of package store, the revision sequence and the format in
// meta, the event log in events, the tenant index in tenants, TF states
// under tfstate/NAME with their kept versions, and their locks in locks
// (see store.go and state.go). A file of format "1" is migrated when it is
// opened (see migrate.go); any other format is refused rather than
// misread.
//
// The engine is tuned for a store of many tenants whose states churn:
// the freelist is not written with each commit, the file is mapped large
// from the start, and the pages of the mapping that reads no longer need
// are handed back to the kernel (Store.ReleaseMapped, which only this
// engine has).
//
// It must not import backend, reconciler, render, cmd or sources.
package bolt
