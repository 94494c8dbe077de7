package schema

import (
	"strconv"
	"time"
)

// Tenant is one Talos Kubernetes cluster.
type Tenant struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ObjectMeta   `json:"metadata"`
	Spec       TenantSpec   `json:"spec"`
	Status     TenantStatus `json:"status,omitzero"`
	Source     Source       `json:"-"`
}

// TenantSpec is what an operator declares about a cluster.
type TenantSpec struct {
	// KubernetesVersion and TalosVersion are x.y.z; Load drops a leading "v".
	KubernetesVersion string `json:"kubernetesVersion"`
	TalosVersion      string `json:"talosVersion"`
	// ControlPlaneEndpoint is the https URL, with a port, of the cluster's
	// Kubernetes API.
	ControlPlaneEndpoint string `json:"controlPlaneEndpoint"`
	// PodNetwork and ServiceNetwork are CIDRs in canonical form; none of them
	// overlaps another. Empty means the Talos defaults.
	PodNetwork     []string     `json:"podNetwork,omitempty"`
	ServiceNetwork []string     `json:"serviceNetwork,omitempty"`
	Plugins        Plugins      `json:"plugins,omitzero"`
	ConfigPatches  []NamedPatch `json:"configPatches,omitempty"`
	// MaintenanceWindows, when set, are the only times in which disruptive
	// work (removing or replacing machines, reboots, upgrades) runs; other
	// work runs at once. Empty: any time.
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
	// Drain is how machines' Kubernetes nodes are drained before they are
	// disrupted; node groups may override it.
	Drain *DrainPolicy `json:"drain,omitempty"`
	// Rollout is what rollouts wait for between machines.
	Rollout *RolloutPolicy `json:"rollout,omitempty"`
	// Backup is when the tenant's etcd is backed up and how many backups
	// are kept; nil: never.
	Backup *BackupPolicy `json:"backup,omitempty"`
	// Restore names the backup the tenant's etcd is restored from, once
	// per value, by a commit that carries Rezuscloud-Allow-Restore.
	Restore *RestoreSpec `json:"restore,omitempty"`
	// ServiceAccountKey is the kind of key the cluster's Kubernetes
	// service-account tokens are signed with, ServiceAccountKeyRSA or
	// ServiceAccountKeyECDSA; empty: the one Talos makes for the version
	// (RSA since Talos 1.7). The key is made once, with the cluster's
	// secrets at its first apply; a value that differs from the key the
	// cluster has fails the tenant's runs.
	ServiceAccountKey string `json:"serviceAccountKey,omitempty"`
}

// Kinds of service-account key.
const (
	ServiceAccountKeyRSA   = "rsa"   // RSA-4096, which every token consumer accepts
	ServiceAccountKeyECDSA = "ecdsa" // ECDSA P-256, made in a millisecond instead of a second
)

// Plugins selects the cluster's network and storage plugins.
type Plugins struct {
	CNI *CNIPlugin `json:"cni,omitempty"`
	CSI *CSIPlugin `json:"csi,omitempty"`
}

// CNIPlugin selects the container network plugin, for example flannel (the
// Talos default), cilium, or none to bring one's own.
type CNIPlugin struct {
	Type    string         `json:"type"`
	Version string         `json:"version,omitempty"`
	Values  map[string]any `json:"values,omitempty"`
}

// CSIPlugin selects the storage plugin.
type CSIPlugin struct {
	Type string `json:"type"`
}

// TenantPhase is where a tenant is in its life.
type TenantPhase string

// Tenant phases.
const (
	TenantForming   TenantPhase = "forming"   // a machine it asks for is missing or not ready yet
	TenantActive    TenantPhase = "active"    // every machine it asks for exists and is ready
	TenantShrinking TenantPhase = "shrinking" // machines are being removed
	TenantRemoving  TenantPhase = "removing"  // the tenant was removed from git and is being destroyed
)

// TenantStatus is what the server observes about a cluster.
type TenantStatus struct {
	Phase TenantPhase `json:"phase,omitempty"`
	// Available: every machine the node groups ask for exists
	// (machines.total equals machines.desired), ready or not. Ready: every
	// desired machine is in stage ready.
	Available bool `json:"available"`
	Ready     bool `json:"ready"`
	// APIReady: an observation says that the cluster's Kubernetes API
	// answers. It is false until something observes the API: the observer
	// of the simulated cloud reports it from its machines' boot stages,
	// probes of the control plane's kube-apiserver will for real clouds.
	APIReady bool `json:"apiReady"`
	// ControlPlaneReady: every control-plane machine is in stage ready.
	ControlPlaneReady bool          `json:"controlPlaneReady"`
	Machines          MachineCounts `json:"machines"`
	// ObservedCommit is the commit whose manifests were last applied. A
	// later commit that leaves the tenant's manifests as they are does not
	// move it: the Commit's results list the tenant as succeeded, and
	// nothing of the tenant is written.
	ObservedCommit string `json:"observedCommit,omitempty"`
	// Message says why the last run failed; empty after a success.
	Message string `json:"message,omitempty"`
	// Retry is set while a failed run waits to run again by itself.
	Retry *RetryStatus `json:"retry,omitempty"`
	// Pending is set while the tenant is suspended (AnnotationSuspend):
	// what the held-back commits would change.
	Pending *PendingChanges `json:"pending,omitempty"`
	// Maintenance is set while disruptive work waits for a maintenance
	// window.
	Maintenance *MaintenanceStatus `json:"maintenance,omitempty"`
	// Rollout is set while the Talos plane rolls a change (a config, a
	// Talos version, a declared restart) through the tenant's machines,
	// one at a time: where it stands.
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Backup is where the tenant's etcd backups stand; its Declared is
	// false for a tenant without spec.backup.
	Backup *BackupStatus `json:"backup,omitempty"`
	// Conditions are Ready, Reconciling and Stalled (see the Condition*
	// constants); Ready follows the machines, the other two the runs.
	Conditions Conditions `json:"conditions,omitempty"`
}

// RetryStatus tells when a tenant whose run failed for a passing reason
// (a held state lock, a cloud API error) runs again. A success clears it.
type RetryStatus struct {
	// Attempts counts the runs that failed in a row.
	Attempts int `json:"attempts"`
	// NextAttemptAt is when the next run starts, unless a new commit
	// starts one earlier.
	NextAttemptAt time.Time `json:"nextAttemptAt"`
	// LastReason is the reason of the last failure (a Reason* constant).
	LastReason string `json:"lastReason"`
}

// RolloutStatus is where a rollout through a tenant's machines stands:
// machine N of Total is being worked on.
type RolloutStatus struct {
	N     int `json:"n"`
	Total int `json:"total"`
	// Machine names the machine being worked on (its host name, else its
	// id), NodeGroup its node group, Op the operation (apply, upgrade,
	// reboot) and Stage the machine's stage as last observed, or "not
	// connected". They are empty while the next machine waits for its
	// gates (the one before ready, etcd healthy).
	Machine   string `json:"machine,omitempty"`
	NodeGroup string `json:"nodeGroup,omitempty"`
	Op        string `json:"op,omitempty"`
	Stage     string `json:"stage,omitempty"`
	// Waiting says what the rollout waits for now, when it waits for
	// more than the machine: "draining node prod-workers-1a2b3c", "its
	// node … to be Ready in Kubernetes", "the workloads of … to be
	// available: …".
	Waiting string `json:"waiting,omitempty"`
	// Kubernetes says where an upgrade of the tenant's Kubernetes
	// stands, while one is under way: "Kubernetes 1.36.4 → 1.37.1:
	// kube-apiserver (1 of 4)", the components going one at a time.
	Kubernetes string `json:"kubernetes,omitempty"`
}

// String says where the rollout stands: "machine 4 of 6 (prod-cp-2
// restarting)", or "machine 4 of 6 waits for its gates", after the step of
// an upgrade of Kubernetes when one is under way.
func (r RolloutStatus) String() string {
	s := "machine " + strconv.Itoa(r.N) + " of " + strconv.Itoa(r.Total)
	if r.Kubernetes != "" {
		s = r.Kubernetes + "; " + s
	}
	if r.Machine == "" {
		return s + " waits for its gates"
	}
	what := r.Machine
	if r.Stage != "" {
		what += " " + r.Stage
	} else if r.Op != "" {
		what += " " + r.Op
	}
	return s + " (" + what + ")"
}

// MachineCounts counts a tenant's or node group's machines.
type MachineCounts struct {
	Desired           int `json:"desired"`           // the sum of the node groups' counts
	Total             int `json:"total"`             // machines that exist
	Ready             int `json:"ready"`             // machines in stage ready
	ControlPlane      int `json:"controlPlane"`      // control-plane machines that exist
	ControlPlaneReady int `json:"controlPlaneReady"` // control-plane machines in stage ready
	Workers           int `json:"workers"`           // worker machines that exist
	// NodesReady counts the machines whose Node the tenant's Kubernetes
	// API shows Ready; absent while the API has not been observed.
	NodesReady int `json:"nodesReady,omitempty"`
}
