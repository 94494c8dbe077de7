// Package backend owns the server's durable side: the bbolt store, the
// Terraform HTTP state backend, authentication by tokens and the read-only
// API. It must not import reconciler or render; where the API has to set
// something in motion it calls a small interface declared here.
//
// # Store
//
// Open opens one bbolt file in the data dir (dir 0700, file 0600); all
// access goes through Store.View and Store.Update, which pass a Tx. The
// store's API is these few types:
//
//   - Store: the open file; View, Update, OnCommit (hooks that receive
//     each commit's changes, in commit order), Close.
//   - Tx: one transaction. API objects (the kinds of schema.Kinds) are
//     written with PutObject, which stamps uid, createdAt, updatedAt and
//     resourceVersion into their metadata in one place and records no
//     change when nothing else differs, and read with GetObject, Get,
//     Scan, List and TenantObjects; Delete removes either. Internal
//     records, which the API never serves, are written with Put.
//     TenantObjects answers which objects belong to a tenant, from an
//     index PutObject and Delete keep by the one rule of schema.TenantOf.
//   - Resource: one stored object, its key, its resourceVersion and its
//     JSON, which for an API object carries the same resourceVersion and
//     is served as it is.
//   - Change: one change of a committed transaction, for hooks, the
//     event log (Tx.Events) and the event Hub.
//
// Every change takes the next resourceVersion of one global sequence,
// strictly increasing across restarts. TF states, their history and
// their locks live in buckets of their own and are reached through the
// state backend. A file of an older format is migrated when it is opened.
//
// # State backend
//
// StateHandler speaks the protocol of tofu's http backend on
// /tfstate/{name}: GET, POST (?ID= while locked), DELETE, LOCK and
// UNLOCK. A POST must be a TF state, plain or OpenTofu-encrypted (see
// parseState); anything else is refused with 400. Stored bytes round-trip
// untouched; the backend does no crypto. A POST whose lineage differs from
// the stored one, or whose serial is lower, is refused with 409; over bytes
// an older server stored unchecked, the guards compare with the newest kept
// version that is a state, and when none is, only an admin may overwrite
// them (anyone may after a DELETE). Reading a
// state needs the edit role, since a state holds the tenant's secrets (in
// clear unless OpenTofu encrypts it). Every POST keeps the previous version
// (50 by default); /api/v1/tfstate/{name}/versions lists their metadata
// and the lock to the view role, and GET ?version=N serves them to admins.
// Locks record the token that took them; one older than the stale-lock
// age is reported, never broken. Releasing a lock without its ID, or
// another token's lock, is a force-unlock: admins only, logged as a
// warning. A POST is one bbolt transaction, so a crash leaves the old
// version or the new one.
//
// # Authentication
//
// Tokens come from a tokens file of `NAME ROLE SHA256-HEX` lines (see
// NewToken) or are minted in memory by Tokens.Ephemeral. Requests carry
// them as HTTP basic auth (user = token name) or as a bearer token; roles
// are view < edit < admin. Without a tokens file every request is allowed
// as an admin, and Server refuses to listen on anything but loopback.
// Secrets are compared in constant time and never logged.
//
// Sessions are the dashboard's logins: a token checked once starts a
// server-side session named by a signed, expiring cookie (SessionCookie),
// which ends on logout, on restart and when its token leaves the tokens
// file. Besides the pages mounted with Server.HandleBrowser, the cookie
// authenticates only reads (GET, HEAD) under /api/v1/: never the state
// backend, its versions, webhooks or a write.
//
// # Server
//
// Server puts these together behind the request log with /healthz,
// /readyz and /version; Server.Handle mounts further handlers behind
// authentication, and Server.HandleBrowser pages that identify their
// visitor by session (the dashboard, package ui). Error bodies use the
// shapes of package api.
package backend
