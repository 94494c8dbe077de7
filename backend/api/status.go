package api

import "time"

// Status is the body of GET /api/v1/status. The server fills Server and
// Counts; Source and Reconciler are absent on a server that reconciles
// nothing.
type Status struct {
	Server     ServerStatus      `json:"server"`
	Counts     ResourceCounts    `json:"counts"`
	Source     *SourceStatus     `json:"source,omitempty"`
	Reconciler *ReconcilerStatus `json:"reconciler,omitempty"`
	// Replicas is present on a server that runs as one of several
	// replicas.
	Replicas *ReplicasStatus `json:"replicas,omitempty"`
	// Error says why Source and Reconciler could not be read, when they
	// could not.
	Error string `json:"statusError,omitempty"`
}

// ServerStatus is the server's own part of the status.
type ServerStatus struct {
	Version   string    `json:"version"`
	StartedAt time.Time `json:"startedAt"`
	// Uptime is a Go duration, whole seconds, e.g. "1h2m3s".
	Uptime        string `json:"uptime"`
	UptimeSeconds int64  `json:"uptimeSeconds"`
	// ResourceVersion is the store's latest resourceVersion.
	ResourceVersion string `json:"resourceVersion"`
}

// ResourceCounts counts the objects of each kind the server holds.
type ResourceCounts struct {
	Tenants       int `json:"tenants"`
	NodeGroups    int `json:"nodeGroups"`
	ConfigPatches int `json:"configPatches"`
	Machines      int `json:"machines"`
	Commits       int `json:"commits"`
}

// SourceStatus is what the server's source (a git repository or a
// directory) last observed. Its fields are those of the source's own
// status, so that the server converts one into the other.
type SourceStatus struct {
	// URL is the repository URL without credentials, or the directory.
	URL string `json:"url"`
	// Ref is the ref the source follows ("" for a directory).
	Ref string `json:"ref"`
	// Revision is the last revision the source yielded.
	Revision string `json:"revision"`
	// LastFetch is when the source last polled (or read the directory),
	// successfully or not.
	LastFetch time.Time `json:"lastFetch,omitzero"`
	// LastSuccess is when a poll last succeeded.
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
	// LastError is the error of the last poll, "" after a success.
	LastError string `json:"lastError,omitempty"`
	// Failures counts the polls that failed in a row.
	Failures int `json:"failures"`
	// Errors counts every poll that failed since the source started.
	Errors int `json:"errors"`
	// NextPoll is when the source polls next, unless triggered earlier.
	NextPoll time.Time `json:"nextPoll,omitzero"`
	// Polls counts the polls so far, failed ones included.
	Polls int `json:"polls"`
	// Fetches counts the fetches (downloads of objects) so far.
	Fetches int `json:"fetches"`
}

// ReconcilerStatus is the reconciler's part of the status.
type ReconcilerStatus struct {
	// LastCommit is the last revision the reconciler received.
	LastCommit string `json:"lastCommit,omitempty"`
	// LastAppliedCommit is the last revision that finished without
	// failures.
	LastAppliedCommit string `json:"lastAppliedCommit,omitempty"`
	// TofuRuns counts the tofu processes started.
	TofuRuns int64 `json:"tofuRuns"`
}

// ReplicasStatus is the replicas' part of the status, on a server that
// runs as one of several replicas on one etcd.
type ReplicasStatus struct {
	// Self is the name of the replica that answered.
	Self string `json:"self"`
	// Leader is the name of the replica that reads git and records
	// commits, "" while none is elected.
	Leader string `json:"leader"`
	// Shards is how many shards the tenants are spread over.
	Shards int `json:"shards"`
	// Members are the live replicas, by name.
	Members []ReplicaStatus `json:"members"`
	// Unowned counts the shards that no live replica holds now.
	Unowned int `json:"unowned"`
}

// ReplicaStatus is one live replica.
type ReplicaStatus struct {
	Name string `json:"name"`
	// Address is the base URL of the replica's API, as it advertises it.
	Address string `json:"address,omitempty"`
	// Since is when the replica joined.
	Since time.Time `json:"since,omitzero"`
	// Leader says whether it is the leader.
	Leader bool `json:"leader,omitempty"`
	// Shards and Tenants count the shards it holds and the tenants in
	// them.
	Shards  int `json:"shards"`
	Tenants int `json:"tenants"`
}
