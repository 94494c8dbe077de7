// Package etcd is the store's engine for several servers: the store of
// package store kept in an etcd cluster, under a key prefix, through
// go.etcd.io/etcd/client/v3. Every replica of the server opens it on the
// same cluster and sees every other replica's commits, in order, through
// its commit hooks.
//
// It owns the layout of the store's keys in etcd, the transactions that
// make an Update whole, TF states in chunks beyond etcd's request limit,
// the event log and its compaction, state locks tied to their holder's
// lease, and the fence that refuses the writes of a replica that lost its
// lease. It must not import backend, reconciler, render, cmd or sources.
//
// Each Store holds an image of the store in memory (TF states' bytes
// excepted), read at one etcd revision when it opens and kept current by
// a watch of the store's keys; View reads an image, so reads cost no
// request. Update runs its function on a copy of the latest image and
// commits what it wrote in one etcd transaction conditional on the
// store's head key being as the copy's image had it (and on the fence,
// and on the locks it read): so commits of all replicas are serial, and
// one that lost the race runs again on the newer image. The head holds
// the store's own revision, the resourceVersion, which each change
// advances by one; each commit's changes are one key of the event log.
// Values beyond etcd's request limit, and every TF state's bytes, are
// blobs of chunks written before the transaction that refers to them
// (see layout.go); a commit with more writes than one transaction takes
// is finished in parts behind a pending key (see pending.go).
package etcd

import (
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config configures Open.
type Config struct {
	// Client is the etcd client the store uses; the caller closes it
	// after the store. Required.
	Client *clientv3.Client
	// Prefix is the prefix of every key the store writes, e.g.
	// "/rezuscloud/". Stores under different prefixes are independent.
	Prefix string
	// EventHistory is how many changes the event log keeps; 0 selects
	// store.DefaultEventHistory.
	EventHistory int
	// CompactInterval is how often the store compacts etcd's own
	// history, keeping at least the event log's horizon; 0 selects 5
	// minutes, and a negative value never compacts.
	CompactInterval time.Duration
	// Now stamps createdAt and updatedAt; nil selects time.Now.
	Now func() time.Time
	// MaxTxnOps is the most operations etcd takes in one transaction
	// (the server's --max-txn-ops); 0 selects etcd's default, 128. A
	// commit that needs more is refused with an error that says so.
	MaxTxnOps int
	// Logger receives the store's own messages; nil discards them.
	Logger *slog.Logger
}
