// Package report pushes the outcome of each reconciled commit to where
// operators look: GitHub, Gitea and Forgejo commit statuses, GitLab commit
// statuses, and a git note under refs/notes/rezuscloud that any forge (or
// none) shows with `git log --notes=rezuscloud`.
//
// StatusesFor turns a schema.Commit at its current phase into Statuses, one
// per tenant under the context "rezuscloud/<instance>/<tenant>" and one for
// the commit as a whole under "rezuscloud/<instance>". The instance name
// keeps two servers that reconcile the same repository from overwriting
// each other's statuses; it defaults to the host name (DefaultInstance).
// A Dispatcher hands Statuses to Reporters in the background: Send never
// blocks, a backlog is coalesced to the newest status per (reporter, sha,
// context), failed deliveries are retried with backoff, and Close drains
// with a deadline.
//
// Phases map to states as follows; the forge columns show what is sent.
//
//	phase                          State     GitHub   GitLab
//	Pending, Validating, Planning  pending   pending  pending
//	Applying                       running   pending  running
//	Succeeded                      success   success  success
//	Failed, PartiallyFailed        failure   failure  failed
//	Invalid                        failure   failure  failed
//	Superseded                     error     error    canceled
//
// A superseded commit applied nothing because a newer revision reached its
// tenants first: it neither failed nor succeeded, so it is reported as
// error (GitHub's "could not run") and canceled on GitLab, with the
// description "superseded by …".
//
// Wiring it up: build the reporters that are configured (NewGitHub,
// NewGitLab, NewGitNotes), hand them to NewDispatcher, call
// d.Send(StatusesFor(instance, commit, url)...) whenever a Commit changes
// (statuses that did not change since they were last delivered are not
// sent again), and d.Close(ctx) on shutdown. Dispatcher.Stats gives the
// counts for metrics.
//
// Tokens are read once (TokenFrom) and kept in a Token, which never prints,
// logs or encodes its value; errors and logs of this package never carry
// one. This package must not block reconciliation: nothing in it is called
// on the reconciler's path but StatusesFor and Dispatcher.Send, and neither
// waits on the network.
package report
