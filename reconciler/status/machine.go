package status

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Probe is what one probe of a machine found, as its status needs it.
type Probe struct {
	// At is when the probe ran.
	At time.Time
	// Connected is false when the machine did not answer; Error then says
	// why, and LastAnswered is when it last answered (zero: never).
	Connected    bool
	Error        string
	LastAnswered time.Time
	Stage        schema.MachineStage
	Ready        bool
	// TalosVersion and KubernetesVersion are what the machine runs.
	TalosVersion      string
	KubernetesVersion string
	// ConfigSHA256 is the hash of the config the machine runs, Want that
	// of the config rendered for it ("" when unknown).
	ConfigSHA256 string
	Want         string
	Services     []schema.MachineService
	Etcd         *schema.EtcdMembership
	// Address is where the machine was reached ("" keeps the stored
	// addresses).
	Address string
	// Hardware, Network and Schematic are the machine's inventory as last
	// read; nil keeps the stored one (a machine that did not answer, or
	// whose inventory was not read).
	Hardware  *schema.MachineHardware
	Network   *schema.MachineNetwork
	Schematic *schema.MachineSchematic
	// Maintenance: the machine runs Talos's maintenance mode.
	Maintenance bool
}

// Machine is a machine's status after a probe p, from its status prev:
// what the machine said, or, when it did not answer, the last stage it was
// seen in (ready no more, its services and etcd membership unknown) with
// connected false, the error and the last time it answered. The
// inventory is the probe's where it has one, else the last read.
func Machine(prev schema.MachineStatus, p Probe) schema.MachineStatus {
	s := prev
	s.Connected, s.LastError, s.Message = p.Connected, p.Error, ""
	if p.Address != "" {
		s.Addresses = []string{p.Address}
	}
	inventory(&s, p)
	if !p.Connected {
		s.Ready, s.Services, s.Etcd = false, nil, nil
		if p.LastAnswered.After(s.LastSeen) {
			s.LastSeen = p.LastAnswered
		}
		switch {
		case p.Stage == schema.StageMaintenance:
			s.Stage, s.ConfigUpToDate = p.Stage, false
		case s.Stage == "" || s.Stage == schema.StageReady || s.Stage == schema.StageMaintenance:
			s.Stage = schema.StageInitializing
		}
		return s
	}
	s.Stage, s.Ready = p.Stage, p.Ready
	if s.Stage == "" {
		s.Stage = schema.StageInitializing
	}
	s.TalosVersion, s.KubernetesVersion = p.TalosVersion, p.KubernetesVersion
	s.ConfigUpToDate = p.Want != "" && p.ConfigSHA256 == p.Want
	s.Services, s.Etcd = p.Services, p.Etcd
	s.LastSeen = p.At
	nodeVerdict(&s, p.At)
	return s
}

// inventory copies what p read of the machine's inventory into s, and
// whether it waits in maintenance mode.
func inventory(s *schema.MachineStatus, p Probe) {
	if p.Hardware != nil {
		s.Hardware = p.Hardware
	}
	if p.Network != nil {
		s.Network = p.Network
	}
	if p.Schematic != nil {
		s.Schematic = p.Schematic
	}
	s.Maintenance = p.Maintenance || p.Stage == schema.StageMaintenance
}

// NodeNotReadyGrace is how long a machine that Talos shows ready may have
// a Node that Kubernetes shows NotReady before the machine shows as not
// ready: long enough for a kubelet's restart, short enough to be seen.
const NodeNotReadyGrace = 2 * time.Minute

// nodeVerdict makes a machine in stage ready not ready, with the Node's
// reason, when the tenant's Kubernetes API has shown its Node NotReady for
// longer than NodeNotReadyGrace at now: Talos's view alone misses a kubelet
// that runs but does not reach the API.
func nodeVerdict(s *schema.MachineStatus, now time.Time) {
	k := s.Kubernetes
	if s.Stage != schema.StageReady || !s.Ready || k == nil || k.Ready {
		return
	}
	for _, c := range k.Conditions {
		if c.Type == "Ready" && !c.LastTransitionTime.IsZero() && now.Sub(c.LastTransitionTime) > NodeNotReadyGrace {
			s.Ready = false
			s.Message = fmt.Sprintf("Node %s NotReady since %s", k.NodeName, c.LastTransitionTime.UTC().Format(time.RFC3339))
			if why := strings.TrimPrefix(strings.TrimSuffix(c.Reason+": "+c.Message, ": "), ": "); why != "" {
				s.Message += ": " + why
			}
		}
	}
}

// SameMachine compares observed facts, not when they were seen: a machine
// whose facts stay as they are is not written again.
func SameMachine(a, b schema.MachineStatus) bool {
	a.LastSeen, b.LastSeen = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}
