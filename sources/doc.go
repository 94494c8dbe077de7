// Package sources fetches and watches the repository of manifests and yields
// immutable snapshots of it: a revision, the ref it came from and a read-only
// file system of the commit's tree.
//
// It knows nothing of what happens to a snapshot afterwards: it must not
// import schema, render, reconciler or backend.
package sources
