// Package replica makes one server a replica among several on one etcd:
// its membership (a key bound to the replica's lease), the election of
// the one leader that reads git and records commits, the ownership of
// tenants through a fixed number of shards, each held by at most one
// replica under its lease, and self-fencing.
//
// Shards are spread by rendezvous hashing with bounded load over the
// live members, and spread again on every change of membership. Each
// shard weighs as many tenants as the leader last recorded in it
// (Spread), so that every member holds about as many tenants; until it
// records them, one each, so that the shards' counts differ by one at
// most. A replica takes the shards
// it should hold once they are free and hands over the others after
// their work is done. A replica that dies frees its shards with its
// lease, within the lease's TTL.
//
// A replica that has not renewed its lease for 2/3 of its TTL (etcd
// unreachable, the process paused) fences itself at once: every context
// of its shards and of its leadership ends, and it reports not ready,
// before its lease can expire and another replica can take over. Once
// etcd answers again it joins with a new lease, and so a new fence
// (Fence), which the store compares in every write of an owner.
//
// It also keeps what the replicas share of their callers: the digests
// of the credentials a replica mints, bound to its lease, and the
// dashboard's sessions, each under a lease of its own that ends with the
// session, so that a session outlives the replica that made it.
//
// It must not import backend, reconciler, render, cmd or sources.
package replica
