package talosnode

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Origins of a node: who created the machine.
const (
	originRecord = "record" // a rezussim machine record; the record's removal removes the node
	originBoot   = "boot"   // Host.Boot, by another simulated cloud
	originMetal  = "metal"  // Host.StartMaintenance, a bare-metal machine
)

// configRef names a config on the node's disk by its SHA-256, with its
// summary.
type configRef struct {
	Hash    string  `json:"sha256"`
	Summary summary `json:"summary"`
}

// etcdState is the node's etcd member, if it runs one.
type etcdState struct {
	Member   bool      `json:"member,omitempty"`
	JoinedAt time.Time `json:"joinedAt,omitzero"`
	ID       uint64    `json:"id,omitempty"`
	// Bootstrapped is set on the node that created its cluster's etcd.
	Bootstrapped bool `json:"bootstrapped,omitempty"`
	// LeftAt is when the member left or was removed; its etcd stays
	// stopped until the node boots again.
	LeftAt time.Time `json:"leftAt,omitzero"`
}

// state is what a node keeps on its disk (state.json) across restarts of
// the host. Stages are not stored: they follow from the plan and the
// clock.
type state struct {
	ID        string    `json:"id"`
	Origin    string    `json:"origin"`
	Name      string    `json:"name,omitempty"`
	Hostname  string    `json:"hostname"`
	Address   string    `json:"address"`
	Platform  string    `json:"platform"`
	Metal     bool      `json:"metal,omitempty"`
	CreatedAt time.Time `json:"createdAt"`

	Version         string `json:"version"`
	PreviousVersion string `json:"previousVersion,omitempty"`
	UpgradeTo       string `json:"upgradeTo,omitempty"`
	// FellBack is set when the boot loader fell back to the previous
	// version after an upgrade that did not come up.
	FellBack  bool `json:"fellBack,omitempty"`
	Installed bool `json:"installed,omitempty"`
	// PoweredOff is set after a reset without reboot.
	PoweredOff bool `json:"poweredOff,omitempty"`

	// Running is the running config (nil in maintenance mode), Staged the
	// one a reboot activates, Revert the one a try-mode apply goes back to
	// at TryUntil.
	Running  *configRef `json:"running,omitempty"`
	Staged   *configRef `json:"staged,omitempty"`
	Revert   *configRef `json:"revert,omitempty"`
	TryUntil time.Time  `json:"tryUntil,omitzero"`

	Plan    plan      `json:"plan"`
	UpSince time.Time `json:"upSince,omitzero"`
	Reboots int       `json:"reboots,omitempty"`
	// Restarted is when each service last restarted through
	// ServiceRestart.
	Restarted map[string]time.Time `json:"restarted,omitempty"`
	Etcd      etcdState            `json:"etcd"`
	// Hardware is what the machine is built of; nil for the default of
	// its kind (MetalHardware, or a small virtual machine).
	Hardware *Hardware `json:"hardware,omitempty"`
	// Inventory is what a test made the node serve instead of what
	// follows from Hardware (Host.SetInventory).
	Inventory *Inventory `json:"inventory,omitempty"`
	// BootError is why the node could not boot (an invalid config in its
	// user data): it stays in the booting stage and never answers.
	BootError string `json:"bootError,omitempty"`
}

// node is one simulated machine of a host. All fields but saveMu are
// guarded by the host's mutex.
type node struct {
	st   state
	addr netip.Addr
	dir  string // the machine's disk

	fd       int // the API listener, -1 while the port is closed
	listenOK bool
	conns    map[net.Conn]struct{}

	maintTLS *tls.Config
	tls      *tls.Config
	tlsFor   string   // the config hash tls was made for
	tlsCAs   [][]byte // the CAs (PEM) of tls.ClientCAs

	fault Fault
	// silent is fault.Silent, which each connection's reads and writes
	// look at without the host's mutex.
	silent atomic.Bool
	// filedUnder is the cluster h.clusters files n under; "" for none.
	filedUnder string
	// changed is closed and replaced whenever something observable
	// changes; streams (watches, followed logs) wait on it.
	changed chan struct{}
	// statusSpec and statusVersion give MachineStatus its resource version.
	statusSpec    string
	statusVersion uint64
	// memberKey is what n's Member showed its cluster peers last,
	// memberOf that cluster, and memberVersion the Member's resource
	// version (see notifyMembers).
	memberKey, memberOf string
	memberVersion       uint64
	schedAt             time.Time
	// versions are the resource versions of the node's inventory
	// resources, by type and id (see stamp); nil until they are read.
	versions map[string]resourceVersion
	// events are the node's latest events, which the tail options of an
	// events stream replay, and logged the state they tell of (see
	// Host.logEvents).
	events []loggedEvent
	logged nodeEvent
	// gone is set when the machine is removed: nothing is saved for it
	// any more.
	gone atomic.Bool

	seq      uint64     // bumped at every change that must be saved
	saveMu   sync.Mutex // orders writes to the disk
	savedSeq uint64     // guarded by saveMu
}

func newNode(st state) *node {
	return &node{st: st, addr: netip.MustParseAddr(st.Address), fd: -1, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
}

// setFault gives n the fault f. Called with h.mu held.
func (n *node) setFault(f Fault) {
	n.fault = f
	n.silent.Store(f.Silent)
}

func (n *node) hostname() string {
	if n.st.Running != nil && n.st.Running.Summary.Hostname != "" {
		return n.st.Running.Summary.Hostname
	}
	return n.st.Hostname
}

func (n *node) controlPlane() bool {
	return n.st.Running != nil && n.st.Running.Summary.ControlPlane
}

func (n *node) cluster() string {
	if n.st.Running == nil {
		return ""
	}
	return n.st.Running.Summary.Cluster
}

// view is what a node looks like at one instant.
type view struct {
	Stage runtime.MachineStage
	// Down means the machine does not answer at all.
	Down bool
	// Busy means a plan is in progress (booting, rebooting, ...).
	Busy bool
}

// viewAt computes the node's stage at now; advance must have run.
func (n *node) viewAt(now time.Time) view {
	switch {
	case n.st.PoweredOff:
		return view{Stage: runtime.MachineStageShuttingDown, Down: true}
	case n.st.BootError != "":
		return view{Stage: runtime.MachineStageBooting, Down: true, Busy: true}
	}
	if s, _, ok := n.st.Plan.at(now); ok {
		return view{Stage: s.Stage, Down: s.Down, Busy: true}
	}
	if n.st.Running == nil {
		return view{Stage: runtime.MachineStageMaintenance}
	}
	return view{Stage: runtime.MachineStageRunning}
}

// running reports whether the node has booted its config and is idle.
func (n *node) running(now time.Time) bool {
	v := n.viewAt(now)
	return v.Stage == runtime.MachineStageRunning && !v.Busy
}

// notify wakes the streams that wait for a change of n.
func (n *node) notify() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// memberID is the etcd member id of a node that joined at t.
func memberID(id string, t time.Time) uint64 {
	sum := sha256.Sum256([]byte(id + t.UTC().Format(time.RFC3339Nano)))
	return binary.BigEndian.Uint64(sum[:8]) | 1
}

// start begins a plan on n at now.
func (n *node) start(now time.Time, steps []step) {
	n.st.Plan = plan{Start: now, Steps: steps}
}

// encodeState marshals n's state for its state file.
func (n *node) encodeState() []byte {
	b, _ := json.MarshalIndent(&n.st, "", "  ")
	return append(b, '\n')
}
