// Package backend is the server's HTTP side: the Terraform HTTP state
// backend, authentication by tokens and sessions, the read-only API with
// its watches and event hub, machine logs, and the mounts of the
// dashboard (package ui). It stores nothing itself: the store (package
// store) holds resources, TF states and locks, and NewServer opens it in
// the data dir with the bbolt engine (store/bolt). It must not import
// reconciler or render; where the API has to set something in motion it
// calls a small interface declared here (Reconcile, Previewer,
// TenantSecrets, MachineLogs, Backups), which the reconciler implements
// and cmd/rezuscloud wires.
//
// # State backend
//
// StateHandler speaks the protocol of tofu's http backend on
// /tfstate/{name}: GET, POST (?ID= while locked), DELETE, LOCK and
// UNLOCK, over the store's state and lock rules (store.WriteState,
// store.RemoveState, store.LockState, store.UnlockState), whose refusals
// it answers with their HTTP codes. A POST must be a TF state, plain or
// OpenTofu-encrypted (see store.ParseState); anything else is refused
// with 400. Stored bytes round-trip untouched; the backend does no
// crypto. A POST whose lineage differs from the stored one, or whose
// serial is lower, is refused with 409; over bytes an older server stored
// unchecked, the guards compare with the newest kept version that is a
// state, and when none is, only an admin may overwrite them (anyone may
// after a DELETE). Reading a state needs the edit role, since a state
// holds the tenant's secrets (in clear unless OpenTofu encrypts it).
// Every POST keeps the previous version (50 by default);
// /api/v1/tfstate/{name}/versions lists their metadata and the lock to
// the view role, and GET ?version=N serves them to admins. Locks record
// the token that took them; one older than the stale-lock age is
// reported, never broken. Releasing a lock without its ID, or another
// token's lock, is a force-unlock: admins only, logged as a warning. A
// POST is one store transaction, so a crash leaves the old version or the
// new one.
//
// # Authentication
//
// Tokens come from a tokens file of `NAME ROLE SHA256-HEX [expires=RFC3339]
// [owner=NAME]` lines (see NewTokenFor) or are minted in memory by
// Tokens.Ephemeral. Requests carry them as HTTP basic auth (user = token
// name) or as a bearer token; roles are view < edit < admin. Without a
// tokens file every request is allowed as an admin, and Server refuses to
// listen on anything but loopback. Secrets are compared in constant time
// and never logged. A token past its expiry is refused (ExpiredError) and
// audited. The last use of each file token is kept in memory and written
// to the store's series area at most once a minute per token, off the
// request path (lastused.go); GET /api/v1/tokens lists the tokens for
// admins, never a secret or digest.
//
// Sessions are the dashboard's logins: a token checked once starts a
// server-side session named by a signed, expiring cookie (SessionCookie),
// which ends on logout, on restart and when its token leaves the tokens
// file. Besides the pages mounted with Server.HandleBrowser, the cookie
// authenticates only reads (GET, HEAD) under /api/v1/: never the state
// backend, its versions, webhooks or a write.
//
// # Backups
//
// The backup endpoints of a tenant (see Server.ServeBackups) list its etcd
// backups for view, queue one for edit and stream one, still encrypted,
// to admins, every download audited; they answer from the Backups the
// reconciler implements, and 503 on a server without a backup store.
//
// # Server
//
// Server puts these together behind the request log with /healthz,
// /readyz and /version, and, for admins, /api/v1/admin/store: a
// consistent copy of the whole store (store.Backuper), audited as the
// downloads of a tenant's credentials are. Server.Handle mounts further handlers behind
// authentication, and Server.HandleBrowser pages that identify their
// visitor by session (the dashboard, package ui). Error bodies use the
// shapes of package api.
package backend
