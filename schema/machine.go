package schema

import "time"

// Machine is one created instance, projected from its tenant's TF state. The
// API serves it; it cannot be declared in git.
type Machine struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Metadata   ObjectMeta    `json:"metadata"`
	Spec       MachineSpec   `json:"spec"`
	Status     MachineStatus `json:"status,omitzero"`
}

// MachineSpec is what TF state says about a machine.
type MachineSpec struct {
	ManagementAddress string `json:"managementAddress"`
	ProviderID        string `json:"providerID"`
	ProviderClass     string `json:"providerClass,omitempty"`
	Shape             string `json:"shape,omitempty"`
	Hostname          string `json:"hostname"`
	Role              string `json:"role"`
	Tenant            string `json:"tenant"`
	NodeGroup         string `json:"nodeGroup"`
	// TFAddress is the address of the resource in the tenant's TF state.
	TFAddress string `json:"tfAddress,omitempty"`
}

// MachineStage is where a machine is in its life, as observed.
type MachineStage string

// Machine stages.
const (
	StageInitializing MachineStage = "initializing"
	// StageMaintenance: the machine runs Talos's maintenance mode and waits
	// for its first config (Talos's own stage of that name).
	StageMaintenance MachineStage = "maintenance"
	StageInstalling  MachineStage = "installing"
	StageConfiguring MachineStage = "configuring"
	StageReady       MachineStage = "ready"
	StageRestarting  MachineStage = "restarting"
	StageStopping    MachineStage = "stopping"
	StageOff         MachineStage = "off"
	StageUpdating    MachineStage = "updating"
	StageRemoving    MachineStage = "removing"
)

// MachineStages lists every stage in life order.
var MachineStages = []MachineStage{
	StageInitializing, StageMaintenance, StageInstalling, StageConfiguring, StageReady,
	StageRestarting, StageStopping, StageOff, StageUpdating, StageRemoving,
}

// MachineStatus is what the server observes about a machine. It may lag or be
// absent, and never overrides the spec. For machines with a Talos API the
// observations come from the machine itself: MachineStatus (stage, ready),
// Version (talosVersion), the running config (kubernetesVersion,
// configUpToDate), ServiceList (services) and, on control planes,
// EtcdMemberList (etcd). The observer writes it only when one of these
// facts changes, never for the passing of time alone.
type MachineStatus struct {
	Stage             MachineStage `json:"stage,omitempty"`
	Ready             bool         `json:"ready"`
	TalosVersion      string       `json:"talosVersion,omitempty"`
	KubernetesVersion string       `json:"kubernetesVersion,omitempty"`
	// ConfigUpToDate: the config the machine runs is the one rendered for
	// its node group (their SHA-256 hashes are equal). Absent is false.
	ConfigUpToDate bool `json:"configUpToDate,omitempty"`
	// Connected: the machine answered the last probe (absent is false).
	// LastError says why the last probe failed, if it did.
	Connected bool     `json:"connected,omitempty"`
	LastError string   `json:"lastError,omitempty"`
	Addresses []string `json:"addresses,omitempty"`
	// LastSeen is, while Connected, when the machine was first seen as
	// the status shows it (it answers still: the status says so within a
	// probe once it stops); otherwise the last time it answered a probe.
	LastSeen time.Time `json:"lastSeen,omitzero"`
	Message  string    `json:"message,omitempty"`
	// Services are the machine's Talos services by name, as it last
	// answered; none while it does not answer.
	Services []MachineService `json:"services,omitempty"`
	// Etcd is a control plane's view of its etcd cluster; nil for
	// workers and while the machine does not answer.
	Etcd *EtcdMembership `json:"etcd,omitempty"`
	// Kubernetes is the machine's Node as the tenant's Kubernetes API
	// last showed it; nil until the API answered with a Node of the
	// machine's host name.
	Kubernetes *MachineKubernetes `json:"kubernetes,omitempty"`
	// Hardware, Network and Schematic are the machine's inventory, as
	// its Talos reports it over COSI, read when the plane connects and
	// whenever it changes; nil until first read. They stay as last read
	// while the machine does not answer.
	Hardware  *MachineHardware  `json:"hardware,omitempty"`
	Network   *MachineNetwork   `json:"network,omitempty"`
	Schematic *MachineSchematic `json:"schematic,omitempty"`
	// Maintenance: the machine runs Talos's maintenance mode (it has no
	// config yet, or waits for one).
	Maintenance bool `json:"maintenance,omitempty"`
}

// MachineKubernetes is a machine's Node in the tenant's Kubernetes.
type MachineKubernetes struct {
	NodeName string `json:"nodeName"`
	// Ready is the Node's Ready condition; Schedulable is false while it
	// is cordoned.
	Ready          bool            `json:"ready"`
	Schedulable    bool            `json:"schedulable"`
	KubeletVersion string          `json:"kubeletVersion,omitempty"`
	Conditions     []NodeCondition `json:"conditions,omitempty"`
}

// NodeCondition is one condition of a Node, as Kubernetes gives it.
type NodeCondition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime,omitzero"`
}

// MachineService is one Talos service of a machine, as ServiceList
// shows it.
type MachineService struct {
	// Name is the service's id: apid, etcd, kubelet, machined, ...
	Name string `json:"name"`
	// State is Talos's: Running, Waiting, Preparing, Finished, Failed, ...
	State string `json:"state"`
	// Health is ServiceHealthy or ServiceUnhealthy; empty for a service
	// without a health check, or before its first.
	Health string `json:"health,omitempty"`
	// Message is an unhealthy service's last health message.
	Message string `json:"message,omitempty"`
}

// Health of a MachineService.
const (
	ServiceHealthy   = "healthy"
	ServiceUnhealthy = "unhealthy"
)

// EtcdMembership is what a control plane says of its etcd cluster.
type EtcdMembership struct {
	// Member: the machine is one of the cluster's members.
	Member bool `json:"member"`
	// Members are the host names of the cluster's members, sorted; none
	// before the cluster is bootstrapped.
	Members []string `json:"members,omitempty"`
	// Error says why the machine could not list the members (etcd has
	// no leader, for instance).
	Error string `json:"error,omitempty"`
}
