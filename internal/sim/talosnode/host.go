package talosnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// DefaultVersion is the Talos version of a machine whose image names none,
// and of bare-metal machines before they install.
const DefaultVersion = "v1.12.6"

// Options configure a Host.
type Options struct {
	// Dir is the sim dir: machine records, their disks, faults.json. It is
	// created if needed. Required.
	Dir string
	// Timings of the stages; zero fields take DefaultTimings.
	Timings Timings
	// Now is the clock; nil means time.Now. Stages follow it lazily;
	// listeners open and close on the real clock.
	Now func() time.Time
	// Logger gets the host's own messages; nil discards them.
	Logger *slog.Logger
	// PollInterval is how often records and faults are read again besides
	// change notifications; default 2 s.
	PollInterval time.Duration
	// Platform is the platform name sim machines report; default "rezussim".
	Platform string
	// KubeBin is the directory of the Kubernetes control plane's binaries
	// (scripts/kube.sh). Without it no machine's cluster gets a
	// Kubernetes API, even when its record asks for one.
	KubeBin string
	// MetalKubernetesAPI gives the clusters that bare-metal machines
	// (StartMaintenance) bootstrap a Kubernetes API too, as a record's
	// KubernetesAPI does for the cloud's machines (with KubeBin).
	MetalKubernetesAPI bool
	// Background restores the nodes whose state is on disk and powers on
	// the machines of the sim dir's records on the host's own goroutine:
	// Open returns at once, and Booted is closed when every machine found
	// has powered on. Until then a machine does not answer, as one that is
	// still booting; real machines boot by themselves, whatever their
	// server does. Calls that create or remove machines (BootMachine,
	// StartMaintenance, Remove, Sync) wait for the restore. Without
	// Background, Open returns after all of that.
	Background bool
}

// Host serves the simulated Talos nodes of one sim dir from one process:
// one gRPC server for all of them, one listening socket per node on
// ADDRESS:50000, and no goroutine or timer per idle node.
type Host struct {
	opts  Options
	t     Timings
	log   *slog.Logger
	store *sim.Store
	claim net.Listener
	acc   *acceptor
	srv   *grpc.Server

	syncMu   sync.Mutex // one Sync at a time
	faultsMu sync.Mutex // one change of faults.json at a time
	mu       sync.Mutex // guards everything below and every node
	byID     map[string]*node
	byAddr   map[netip.Addr]*node
	clusters map[string]map[*node]struct{}
	// logging is set while logEvents reads a node's state: advance then
	// leaves every node as it stands, so that logging moves none on.
	logging bool
	trustd  map[string][]byte // cluster, token and CA → CA key
	faults  Faults
	checked map[string]checkedConfig
	sched   *scheduler
	// checkedOut appends to the sim dir's file of checked configs; nil
	// when it cannot be written. parsed counts the configs this host
	// loaded and validated itself.
	checkedOut *os.File
	parsed     int

	kube kubePlanes
	etcd etcdStore

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	restored chan struct{} // closed after restore
	booted   chan struct{} // closed after the first Sync
}

// checkedConfig caches the validation of a config by its hash and mode.
type checkedConfig struct {
	sum summary
	err error
}

// Open starts a host on opts.Dir: it claims the dir's address block,
// restores the nodes whose state is on disk, boots the machines whose
// records it finds, and keeps watching records and faults until Close.
func Open(opts Options) (*Host, error) {
	if opts.Dir == "" {
		return nil, errors.New("talos node host: no sim dir")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 2 * time.Second
	}
	if opts.Platform == "" {
		opts.Platform = "rezussim"
	}
	store, err := sim.Open(opts.Dir)
	if err != nil {
		return nil, err
	}
	claim, err := claimBlock(store)
	if err != nil {
		return nil, err
	}
	acc, err := newAcceptor()
	if err != nil {
		claim.Close()
		return nil, err
	}
	h := &Host{
		opts: opts, t: opts.Timings.withDefaults(), log: opts.Logger, store: store, claim: claim, acc: acc,
		byID: map[string]*node{}, byAddr: map[netip.Addr]*node{}, clusters: map[string]map[*node]struct{}{},
		trustd: map[string][]byte{}, checked: map[string]checkedConfig{},
		etcd: etcdStore{dir: filepath.Join(opts.Dir, etcdDir)},
		kube: kubePlanes{root: filepath.Join(opts.Dir, kubeDir), log: opts.Logger},
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.sched = newScheduler(h.tick)
	h.srv = h.newGRPCServer()
	h.restored, h.booted = make(chan struct{}), make(chan struct{})
	if !opts.Background {
		if err := h.boot(); err != nil {
			h.Close()
			return nil, err
		}
	}
	h.wg.Add(3)
	go func() { defer h.wg.Done(); h.srv.Serve(trackingListener{Listener: h.acc, h: h}) }()
	go func() { defer h.wg.Done(); h.sched.run(h.ctx) }()
	go func() {
		defer h.wg.Done()
		if opts.Background {
			if err := h.boot(); err != nil {
				h.log.Error("simulated nodes", "err", err)
			}
		}
		h.watch(h.ctx)
	}()
	return h, nil
}

// boot restores the nodes whose state is on disk, then powers on the
// machines of the records (the first Sync), closing h.restored and
// h.booted in turn.
func (h *Host) boot() error {
	start := time.Now()
	h.loadChecked()
	err := h.restore()
	close(h.restored)
	if err == nil {
		h.resumeKube()
	}
	if err == nil {
		if serr := h.Sync(); serr != nil {
			h.log.Warn("read machine records", "err", serr)
		}
	}
	close(h.booted)
	h.mu.Lock()
	h.log.Debug("simulated nodes booted", "nodes", len(h.byID), "configs parsed", h.parsed, "configs known", len(h.checked), "took", time.Since(start))
	h.mu.Unlock()
	return err
}

// waitRestored waits until the nodes whose state is on disk are restored
// (Options.Background), or the host closes.
func (h *Host) waitRestored() {
	select {
	case <-h.restored:
	case <-h.ctx.Done():
	}
}

// Booted is closed once the machines of the sim dir's records found at
// Open have powered on (see Options.Background).
func (h *Host) Booted() <-chan struct{} { return h.booted }

// claimBlock claims the store's address block for the host's lifetime. An
// empty store whose block another live process holds gets a new block.
func claimBlock(store *sim.Store) (net.Listener, error) {
	l, err := store.Block().Claim()
	if errors.Is(err, sim.ErrBlockInUse) {
		if rerr := store.Reblock(); rerr != nil {
			return nil, fmt.Errorf("%w; %w", err, rerr)
		}
		l, err = store.Block().Claim()
	}
	return l, err
}

func (h *Host) newGRPCServer() *grpc.Server {
	creds := credentials.NewTLS(&tls.Config{GetConfigForClient: h.tlsConfigFor})
	srv := grpc.NewServer(
		grpc.Creds(creds),
		grpc.ChainUnaryInterceptor(h.unaryInterceptor),
		grpc.ChainStreamInterceptor(h.streamInterceptor),
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(8<<10),
		grpc.WriteBufferSize(8<<10),
	)
	api := &machineAPI{h: h}
	machine.RegisterMachineServiceServer(srv, api)
	machine.RegisterLifecycleServiceServer(srv, &lifecycleAPI{a: api})
	cosiv1alpha1.RegisterStateServer(srv, cosiserver.NewState(&cosiState{h: h}))
	return srv
}

// Close stops serving every node; their state stays on disk.
func (h *Host) Close() error {
	h.cancel()
	<-h.booted // a boot in the background stops at the cancel
	h.srv.Stop()
	h.acc.Close()
	h.wg.Wait()
	h.kube.close()
	h.mu.Lock()
	for _, n := range h.byID {
		h.closeListener(n)
	}
	if h.checkedOut != nil {
		h.checkedOut.Close()
		h.checkedOut = nil
	}
	h.mu.Unlock()
	return h.claim.Close()
}

// Dir returns the sim dir.
func (h *Host) Dir() string { return h.opts.Dir }

// Block returns the sim dir's address block.
func (h *Host) Block() sim.Block { return h.store.Block() }

// Timings returns the stage durations in force.
func (h *Host) Timings() Timings { return h.t }

func (h *Host) now() time.Time { return h.opts.Now() }

// Machine describes a machine of another simulated cloud that boots as a
// Talos node (see BootMachine).
type Machine struct {
	// ID names the machine and its disk (sim.ValidDiskID).
	ID string
	// Address is the loopback address its API listens on (port 50000).
	Address string
	// Hostname defaults to "talos-" and the last 6 characters of ID.
	Hostname string
	// Name is an optional display name; faults may name it.
	Name string
	// Platform is the name Version reports, e.g. "openstack"; default "nocloud".
	Platform string
	// Version is the Talos version of its image; default DefaultVersion.
	Version string
	// UserData is the machine config it boots with; empty means
	// maintenance mode.
	UserData []byte
	// CreatedAt is its power-on time; zero means now.
	CreatedAt time.Time
	// Hardware is what it is built of, e.g. its flavor's sizes
	// (VMHardware); nil for a small virtual machine (ShapeHardware).
	Hardware *Hardware
}

// Boot powers on a cloud machine with its user data, as a Talos node:
// a shorthand of BootMachine.
func (h *Host) Boot(id, address string, userData []byte) error {
	return h.BootMachine(Machine{ID: id, Address: address, UserData: userData})
}

// BootMachine powers on a machine of another simulated cloud. Booting a
// machine that already exists with the same address changes nothing (the
// caller may announce its machines again after a restart); another address
// is an error. The machine lives until Remove.
func (h *Host) BootMachine(m Machine) error {
	h.waitRestored()
	if !sim.ValidDiskID(m.ID) {
		return fmt.Errorf("boot machine %q: not a valid machine id", m.ID)
	}
	addr, err := loopbackAddr(m.Address)
	if err != nil {
		return fmt.Errorf("boot machine %s: %w", m.ID, err)
	}
	if m.Platform == "" {
		m.Platform = "nocloud"
	}
	if m.Version == "" {
		m.Version = DefaultVersion
	}
	if m.Hostname == "" {
		m.Hostname = "talos-" + m.ID[max(0, len(m.ID)-6):]
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = h.now()
	}
	if m.Hardware != nil {
		if err := m.Hardware.check(); err != nil {
			return fmt.Errorf("boot machine %s: %w", m.ID, err)
		}
		hw := m.Hardware.clone()
		m.Hardware = &hw
	}
	st := state{ID: m.ID, Origin: originBoot, Name: m.Name, Hostname: m.Hostname, Address: addr.String(),
		Platform: m.Platform, CreatedAt: m.CreatedAt.UTC(), Version: m.Version, Hardware: m.Hardware}
	return h.add(st, m.UserData, true)
}

// StartMaintenance powers on a bare-metal machine at address: it boots
// into maintenance mode with no config and waits for ApplyConfiguration,
// then installs Talos. Its id is "metal-" and the address with dashes. A
// machine already there is left as it is, unless it was powered off by a
// reset without reboot: then it powers on again. Its hardware is
// MetalHardware.
func (h *Host) StartMaintenance(address string) error {
	return h.StartMaintenanceWith(address, MetalHardware())
}

// StartMaintenanceWith is StartMaintenance of a machine built of hw, as
// a metal node group lists it. A machine already there keeps its own.
func (h *Host) StartMaintenanceWith(address string, hw Hardware) error {
	if err := hw.check(); err != nil {
		return fmt.Errorf("start metal machine %s: %w", address, err)
	}
	hw = hw.clone()
	h.waitRestored()
	addr, err := loopbackAddr(address)
	if err != nil {
		return fmt.Errorf("start metal machine: %w", err)
	}
	id := MetalID(addr)
	h.mu.Lock()
	if n := h.byID[id]; n != nil {
		if !n.st.PoweredOff {
			h.mu.Unlock()
			return nil
		}
		n.st.PoweredOff = false
		h.powerOn(n, nil, h.now())
		save := h.changed(n)
		h.mu.Unlock()
		return save()
	}
	h.mu.Unlock()
	st := state{ID: id, Origin: originMetal, Hostname: "talos-" + hashHex([]byte(id))[:3] + "-" + hashHex([]byte(id))[3:6],
		Address: addr.String(), Platform: "metal", Metal: true, CreatedAt: h.now().UTC(), Version: DefaultVersion, Hardware: &hw}
	return h.add(st, nil, true)
}

// MetalID is the machine id of the bare-metal machine at addr.
func MetalID(addr netip.Addr) string {
	b := []byte(addr.String())
	for i, c := range b {
		if c == '.' || c == ':' {
			b[i] = '-'
		}
	}
	return "metal-" + string(b)
}

func loopbackAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("address %q: %w", s, err)
	}
	if !sim.Loopback(a) {
		return netip.Addr{}, fmt.Errorf("address %s: simulated machines live on loopback only (127.B.x.y, B not 0)", a)
	}
	return a, nil
}

// Remove destroys a machine booted with Boot or StartMaintenance (or one
// whose record is gone): it stops answering and its disk is deleted.
// Removing an unknown machine is not an error.
func (h *Host) Remove(id string) error {
	h.waitRestored()
	h.mu.Lock()
	n := h.byID[id]
	var cluster string
	if n != nil {
		cluster = n.cluster()
		h.dropLocked(n)
	}
	h.mu.Unlock()
	if n == nil || !sim.ValidDiskID(id) {
		return nil
	}
	h.forgetEtcd(cluster)
	n.saveMu.Lock()
	defer n.saveMu.Unlock()
	if err := os.RemoveAll(h.diskDir(id)); err != nil {
		return fmt.Errorf("remove machine %s: %w", id, err)
	}
	return nil
}

// NodeInfo is what the host tells about a node, for tests and tools; the
// Talos API is what clients use.
type NodeInfo struct {
	ID, Name, Hostname, Address, Origin, Platform string
	Stage                                         runtime.MachineStage
	// Reachable is false while the machine is down or refuses
	// connections.
	Reachable       bool
	Version         string
	PreviousVersion string
	ControlPlane    bool
	// ConfigSHA256 is the SHA-256 of the running config; "" in maintenance mode.
	ConfigSHA256 string
	StagedSHA256 string
	EtcdMember   bool
	BootError    string
	Fault        Fault
}

// Node returns a node by machine id, name, host name or address.
func (h *Host) Node(key string) (NodeInfo, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.lookup(key)
	if n == nil {
		return NodeInfo{}, false
	}
	return h.info(n), true
}

// Nodes returns every node, sorted by id.
func (h *Host) Nodes() []NodeInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]NodeInfo, 0, len(h.byID))
	for _, n := range h.byID {
		out = append(out, h.info(n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (h *Host) info(n *node) NodeInfo {
	now := h.now()
	h.advance(n, now)
	v := n.viewAt(now)
	i := NodeInfo{
		ID: n.st.ID, Name: n.st.Name, Hostname: n.hostname(), Address: n.st.Address, Origin: n.st.Origin,
		Platform: n.st.Platform, Stage: v.Stage, Reachable: !v.Down && !n.fault.Refuse,
		Version: n.st.Version, PreviousVersion: n.st.PreviousVersion, ControlPlane: n.controlPlane(),
		EtcdMember: n.st.Etcd.Member, BootError: n.st.BootError, Fault: n.fault,
	}
	if n.st.Running != nil {
		i.ConfigSHA256 = n.st.Running.Hash
	}
	if n.st.Staged != nil {
		i.StagedSHA256 = n.st.Staged.Hash
	}
	return i
}

// lookup finds a node by id, address, name or host name. Called with h.mu held.
func (h *Host) lookup(key string) *node {
	if n := h.byID[key]; n != nil {
		return n
	}
	if a, err := netip.ParseAddr(key); err == nil {
		return h.byAddr[a]
	}
	for _, n := range h.byID {
		if n.st.Name == key || n.hostname() == key {
			return n
		}
	}
	return nil
}

func (h *Host) diskDir(id string) string { return filepath.Join(h.opts.Dir, sim.DisksDir, id) }
