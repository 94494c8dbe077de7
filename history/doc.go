// Package history keeps the history of machines and tenants: the
// transitions of each machine's stage, readiness, connection and config
// freshness, the gauges its Talos serves every minute (load, memory, etcd
// DB size and leadership), each tenant's availability (ready machines of
// desired, apiReady) and marks for rollouts, reboots and restores.
//
// It owns the format, recording, retention and queries. Everything is
// kept in the store's series area (store.Tx.PutSeries), which takes no
// revision and never reaches the event log, in compact binary chunks
// under keys
//
//	h/TENANT/t/MACHINE/DAY   transitions of a machine, one chunk a day
//	h/TENANT/m/HOUR/MACHINE  samples at full resolution, one chunk an hour
//	h/TENANT/d/MACHINE/DAY   downsampled samples, one chunk a day
//	h/TENANT/a/DAY           the tenant's availability, one chunk a day
//	h/TENANT/k/DAY           marks, one chunk a day
//
// where DAY and HOUR are the chunk's start in Unix seconds, ten digits.
// Samples written before they were keyed by hour first, under
// h/TENANT/s/MACHINE/HOUR, are read and downsampled as the others are.
// Compact downsamples the samples older than Options.Full to
// Options.Step and drops what is older than Options.Keep. The bytes a
// machine takes a day are bounded (MaxMachineDayBytes): one sample a
// minute at most, MaxTransitionsPerDay transitions at most.
//
// The functions take a store.Tx, so that a caller records history in the
// transaction that writes the status it follows. This package must not
// import backend, reconciler or cmd.
package history
