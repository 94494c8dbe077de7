package schema

import (
	"strings"
	"time"
)

// The history of machines and tenants: what the API answers at
// GET /api/v1/tenants/{t}/machines/{id}/history and
// GET /api/v1/tenants/{t}/history. Package history keeps and queries it.

// MachineHistory is a machine's history between Since and Until.
type MachineHistory struct {
	Tenant  string    `json:"tenant"`
	Machine string    `json:"machine"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	// Step is the samples' resolution in seconds: 60 within the full
	// resolution's window, the downsampled step before it, or larger
	// when the query asked for it.
	Step int64 `json:"step"`
	// Transitions are the machine's states in time order; the first is
	// the state at Since when one is known from before it.
	Transitions []MachineTransition `json:"transitions"`
	// Samples are the gauges in time order, one per Step at most.
	Samples []MachineSample `json:"samples"`
}

// MachineTransition is the state a machine entered at At: any change
// of its stage, readiness, connection or config freshness.
type MachineTransition struct {
	At             time.Time    `json:"at"`
	Stage          MachineStage `json:"stage,omitempty"`
	Ready          bool         `json:"ready"`
	Connected      bool         `json:"connected"`
	ConfigUpToDate bool         `json:"configUpToDate"`
}

// Same reports whether t and u are the same state, whenever entered.
func (t MachineTransition) Same(u MachineTransition) bool {
	t.At, u.At = time.Time{}, time.Time{}
	return t == u
}

// MachineSample is the gauges a machine's Talos served at At (LoadAvg,
// Memory, and for control planes EtcdStatus). A downsampled sample holds
// the mean of its step's loads and memory and the last etcd facts.
type MachineSample struct {
	At    time.Time `json:"at"`
	Load1 float64   `json:"load1"`
	// MemoryUsedBytes is total minus available; MemoryTotalBytes the
	// machine's memory.
	MemoryUsedBytes  uint64 `json:"memoryUsedBytes"`
	MemoryTotalBytes uint64 `json:"memoryTotalBytes"`
	// Control planes: etcd's DB size and whether its member leads.
	EtcdDBSizeBytes int64 `json:"etcdDBSizeBytes,omitempty"`
	EtcdLeader      bool  `json:"etcdLeader,omitempty"`
}

// TenantHistory is a tenant's history between Since and Until.
type TenantHistory struct {
	Tenant string    `json:"tenant"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	// Availability is the tenant's derived availability in time order,
	// one entry per change.
	Availability []TenantAvailability `json:"availability"`
	// Machines are the transitions of each of its machines, by machine
	// name.
	Machines []MachineTimeline `json:"machines"`
	// Marks are rollouts, reboots and restores, in time order.
	Marks []HistoryMark `json:"marks"`
}

// TenantAvailability is a tenant's availability from At on.
type TenantAvailability struct {
	At time.Time `json:"at"`
	// Ready machines of Desired ones, and whether its Kubernetes API
	// answers.
	Ready    int  `json:"ready"`
	Desired  int  `json:"desired"`
	APIReady bool `json:"apiReady"`
}

// MachineTimeline is one machine's transitions within a tenant history.
type MachineTimeline struct {
	Machine     string              `json:"machine"`
	Transitions []MachineTransition `json:"transitions"`
}

// HistoryMark is an event worth marking on a timeline.
type HistoryMark struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Machine is the machine it concerns, if one.
	Machine string `json:"machine,omitempty"`
	Message string `json:"message,omitempty"`
}

// Kinds of HistoryMark.
const (
	MarkRolloutStarted  = "rolloutStarted"
	MarkRolloutFinished = "rolloutFinished"
	MarkReboot          = "reboot"
	MarkRestoreStarted  = "restoreStarted"
	MarkRestoreFinished = "restoreFinished"
)

// Words says the state t entered in a few words: "ready", "restarting,
// no answer", "configuring, not ready, config outdated".
func (t MachineTransition) Words() string {
	words := []string{string(t.Stage)}
	if t.Stage == "" {
		words[0] = "not observed"
	}
	if !t.Connected {
		words = append(words, "no answer")
	}
	if t.Stage != "" && !t.Ready {
		words = append(words, "not ready")
	} else if t.Ready && t.Stage != StageReady {
		words = append(words, "ready")
	}
	if t.Connected && !t.ConfigUpToDate {
		words = append(words, "config outdated")
	}
	return strings.Join(words, ", ")
}

// markWords are the kinds of HistoryMark in words.
var markWords = map[string]string{
	MarkRolloutStarted: "rollout started", MarkRolloutFinished: "rollout finished", MarkReboot: "reboot",
	MarkRestoreStarted: "restore started", MarkRestoreFinished: "restore finished",
}

// MarkWords says what a mark of the kind is: "rollout started",
// "reboot", ...; an unknown kind as it is.
func MarkWords(kind string) string {
	if w, ok := markWords[kind]; ok {
		return w
	}
	return kind
}
