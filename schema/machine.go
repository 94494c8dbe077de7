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
// Version (talosVersion) and the running config (kubernetesVersion,
// configUpToDate).
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
	Connected bool      `json:"connected,omitempty"`
	LastError string    `json:"lastError,omitempty"`
	Addresses []string  `json:"addresses,omitempty"`
	LastSeen  time.Time `json:"lastSeen,omitzero"`
	Message   string    `json:"message,omitempty"`
}
