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
