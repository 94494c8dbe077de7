// Package sources fetches and watches the repository of manifests and yields
// immutable snapshots of it: a revision, the ref it came from and a read-only
// file system of the commit's tree.
//
// Two sources implement Source: Git polls a remote repository through
// go-git and keeps its clone in the data directory; Dir watches a local
// directory with fsnotify. OpenRevision reads one commit of a local
// repository, for the CLI.
//
// A source reports an unreachable repository as an error for that poll and
// keeps going; it never turns a failure into an empty snapshot. Credentials
// stay out of URLs, errors and logs.
//
// A snapshot's commit metadata is bounded, whatever the commit holds: the
// message to its first line and 64 KiB of the rest, the author to 1 KiB.
// The trailers are read from the full message first (internal/commitmsg),
// so that a long message cannot hide or fake them.
//
// A commit's file system names the blob of each regular file
// (ContentHash) and the tree of each directory (TreeHash), so that a
// loader can tell an unchanged file without reading it, and an unchanged
// directory without listing it.
//
// A snapshot of a commit tells whether it descends from another revision
// (Snapshot.Descends), from the clone alone: a Git source fetches the whole
// history of what it follows. Deciding what a commit that does not
// descend from the one applied means is the reconciler's.
//
// Commit signature checks: with a Verifier (GitOptions.Verifier), each
// snapshot carries the outcome of checking its commit's signature, SSH
// (sshsig, namespace git) against an OpenSSH allowed_signers file or GPG
// against an armored keyring, in Snapshot.Signature. Deciding what an
// unverified commit means is the reconciler's.
//
// It knows nothing of what happens to a snapshot afterwards: it must not
// import schema, render, reconciler or backend.
package sources
