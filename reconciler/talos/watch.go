package talos

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// A tenant's first control plane, watched, costs on the server's side
// one stream connection (Pool.Streams: HTTP/2 speaking gRPC's protocol,
// shared with the tenant's events stream through it, whose reader is one
// goroutine) and a fixed budget of goroutines: per stream, the request's
// and the plane's reader (readKind), and the plane's follow: 2×5+1 = 11.
// Its reads (in full when the watch opens, then the parts that its
// events say changed) go through the pool's shared client, held only
// while it reads, so that no gRPC channel stays open for a watch. The
// tenant's other machines' watches go through that control plane, whose
// apid forwards their streams (the "node" header, as talosctl -n sends
// it), so they share its connection: 2×5+1 = 11 goroutines for another
// control plane, 2×4+1 = 9 for a worker, and no connection of their own.
// A worker may go through any control plane of its tenant, another
// control plane only through the first, whose watch is always direct. A
// watch opens directly while no gateway answers, and moves back to one
// once one does (ObserverOptions.RegateInterval).
//
// watchedKinds are the COSI kinds watched on every machine, and the part
// of the observation each refreshes: MachineStatus (stage, readiness,
// services), the running MachineConfig (its hash), the disks (the
// hardware) and the node addresses (the network). The other inventory
// kinds (processors, memory, links, routes, extensions) change only with
// a boot, which ends the watch's connection, so they are read again when
// the watch is opened again; a stage change reads them too.
var watchedKinds = []watchedKind{
	{runtime.NamespaceName, runtime.MachineStatusType, refreshStatus},
	{config.NamespaceName, config.MachineConfigType, refreshConfig},
	{block.NamespaceName, block.DiskType, refreshHardware},
	{network.NamespaceName, network.NodeAddressType, refreshNetwork},
}

// controlPlaneKinds are watched on control planes too: the cluster's
// members, which move with the etcd membership.
var controlPlaneKinds = []watchedKind{
	{cluster.NamespaceName, cluster.MemberType, refreshEtcd},
}

type watchedKind struct {
	ns   resource.Namespace
	typ  resource.Type
	part refreshPart
}

// refreshPart is a part of an observation that a watch event refreshes.
type refreshPart uint8

const (
	refreshStatus refreshPart = 1 << iota
	refreshConfig
	refreshHardware
	refreshNetwork
	refreshEtcd
)

// Watch backoff: a broken watch is opened again at once (a machine that
// refuses it is probed instead), then after watchRetryMin, doubling up to
// watchRetryMax or the probe TTL, whichever is shorter.
const (
	watchRetryMin = 2 * time.Second
	// watchRetryMax bounds the backoff: a machine whose watch works
	// again is followed again within it.
	watchRetryMax = 30 * time.Second
	// watchHealthy is how long a watch must have run for the next break
	// to start the backoff from watchRetryMin again.
	watchHealthy = time.Minute
	// watchEvents is the buffer of a machine's event channel.
	watchEvents = 16
)

// watchSet is the plane's watches, one per machine with a Talos API
// whose tenant's bundle is known.
type watchSet struct {
	pl *Plane

	mu   sync.Mutex
	byID map[string]*machineWatch
	// gateways are each tenant's control planes, by id: a worker's watch
	// goes through one of them (via).
	gateways map[string][]gateway
	// regate is how often a worker's direct watch looks for a gateway.
	regate time.Duration
	wg     sync.WaitGroup
	// leftOut is set while the bound leaves machines unwatched and off
	// the events streams: the observer's passes probe them on the TTL.
	leftOut atomic.Bool
	// events are the events streams of the machines the bound leaves
	// unwatched, by tenant (events.go).
	events map[string]*tenantEvents
	// prompts counts the probes that events prompted, and prompting those
	// not done yet.
	prompts, prompting atomic.Int64
}

// machineWatch is one machine's watch.
type machineWatch struct {
	tenant string
	bundle []byte
	sum    [32]byte
	m      Machine
	cancel context.CancelFunc
	// through is the address whose connection the watch uses while it is
	// open: the machine's own, or its tenant's gateway's.
	through string
}

// gateway is a control plane whose apid forwards the calls of its
// tenant's workers (the "node" header, as talosctl -n sends it), so that
// the watches of a tenant's workers share its connection instead of
// keeping one each.
type gateway struct{ id, address string }

func newWatchSet(pl *Plane) *watchSet {
	return &watchSet{pl: pl, byID: map[string]*machineWatch{}, gateways: map[string][]gateway{}, events: map[string]*tenantEvents{}}
}

// via is the address through which m's watch opens: the first of its
// gateways (gatewaysFor) that runs and answers by its standing
// observation, or that was not observed yet (the watch's first read
// checks that the machine that answers is m: answeredAs); m's own address
// for the tenant's first control plane, for a machine whose gateways do
// not answer, for a machine in maintenance mode, and with direct.
func (ws *watchSet) via(tenant string, m Machine, direct bool) string {
	if direct {
		return m.Address
	}
	if o, ok := ws.pl.prober.Last(m.ID); ok && o.Maintenance {
		return m.Address // no gateway forwards to a machine without its config
	}
	gws := ws.gatewaysFor(tenant, m)
	for _, g := range gws {
		if _, seen := ws.pl.prober.Last(g.id); !seen || ws.pl.prober.forwards(g.id) {
			return g.address
		}
	}
	return m.Address
}

// gatewaysFor is the control planes through which m's watch may open: a
// worker's, every control plane of its tenant; another control plane's,
// only the tenant's first, whose own watch is always direct, so that no
// two control planes go through each other; none for the first.
func (ws *watchSet) gatewaysFor(tenant string, m Machine) []gateway {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	gws := ws.gateways[tenant]
	switch {
	case !m.ControlPlane:
		return gws
	case len(gws) == 0 || gws[0].id == m.ID:
		return nil
	}
	return gws[:1]
}

// kept is the address of a control plane of tenant, other than m,
// through which a probe of m goes: one whose own watch is open directly
// (it answers), else the one that carries the tenant's events stream; so
// that the probes of the tenant's machines that come due together, or
// that its events prompt, share one connection for as long as the pool
// keeps it; "" when there is none.
func (ws *watchSet) kept(tenant string, m Machine) string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, g := range ws.gateways[tenant] {
		if w := ws.byID[g.id]; g.id != m.ID && w != nil && w.through == g.address && ws.pl.prober.forwards(g.id) {
			return g.address
		}
	}
	if ev := ws.events[tenant]; ev != nil && ev.gw.id != m.ID && ws.pl.prober.forwards(ev.gw.id) {
		return ev.gw.address
	}
	return ""
}

// opened notes the address through which m's watch is open ("" once it
// is not).
func (ws *watchSet) opened(id, through string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.byID[id]; w != nil {
		w.through = through
	}
}

// throughNode is ctx for calls to m through address: with the "node"
// header that makes a gateway's apid forward them, when address is not
// m's own.
func throughNode(ctx context.Context, m Machine, address string) context.Context {
	if address == m.Address {
		return ctx
	}
	return client.WithNode(ctx, m.Address)
}

// Watched returns how many machines the plane watches (watches that run,
// whether their streams are open or they back off).
func (pl *Plane) Watched() int {
	pl.watches.mu.Lock()
	defer pl.watches.mu.Unlock()
	return len(pl.watches.byID)
}

// Watching returns how many machines have an open watch now; the others
// are probed once per probe TTL.
func (pl *Plane) Watching() int { return pl.prober.Watching() }

// Probes counts the probes made so far.
func (pl *Plane) Probes() int64 { return pl.prober.Probes() }

// ProbeSlots returns how many probes may run at once now (probeSlots).
func (pl *Plane) ProbeSlots() int { return pl.prober.slots.slots() }

// DefaultMaxWatched is how many machines the plane follows with watches
// unless ObserverOptions.MaxWatched says otherwise. A watched machine
// keeps its streams open: at 1,000 tenants, where the bound watches the
// first control planes of 256 of them, about 130 KiB each beyond what
// their tenants' events streams would cost without (docs/scaling.md), so
// the default bounds that to about 33 MB; the machines beyond it follow
// by their tenant's events stream (events.go).
const DefaultMaxWatched = 256

// machineCount is the number of machines of byTenant.
func machineCount(byTenant map[string][]Machine) int {
	n := 0
	for _, ms := range byTenant {
		n += len(ms)
	}
	return n
}

// watchOrder returns the machines of byTenant whose tenant's bundle is
// known, in the order they get watches while there are fewer than the
// bound: each tenant's first control plane, the other control planes,
// then the workers, each by tenant and machine id.
func watchOrder(byTenant map[string][]Machine, bundle func(string) []byte) []tenantMachine {
	out := make([]tenantMachine, 0, machineCount(byTenant))
	for tenant, ms := range byTenant {
		b := bundle(tenant)
		if b == nil {
			continue
		}
		sum := sha256.Sum256(b)
		for _, m := range ms {
			out = append(out, tenantMachine{tenant: tenant, bundle: b, sum: sum, m: m})
		}
	}
	// Each tenant's first control plane, then the other control planes,
	// then the workers: under a bound, as many tenants as it allows keep
	// a gateway, through which their other machines' watches and probes
	// go.
	first := map[string]string{}
	for _, tm := range out {
		if id, ok := first[tm.tenant]; tm.m.ControlPlane && (!ok || tm.m.ID < id) {
			first[tm.tenant] = tm.m.ID
		}
	}
	rank := func(tm tenantMachine) int {
		switch {
		case first[tm.tenant] == tm.m.ID:
			return 0
		case tm.m.ControlPlane:
			return 1
		}
		return 2
	}
	slices.SortFunc(out, func(a, b tenantMachine) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.tenant, b.tenant), strings.Compare(a.m.ID, b.m.ID))
	})
	return out
}

// tenantMachine is a machine with its tenant's bundle.
type tenantMachine struct {
	tenant string
	bundle []byte
	sum    [32]byte
	m      Machine
}

// sync starts the watches of the machines in byTenant that have none
// (or whose address, role or bundle changed), up to max machines in
// watchOrder, and stops those of machines that are gone or beyond the
// bound.
func (ws *watchSet) sync(ctx context.Context, byTenant map[string][]Machine, bundle func(string) []byte, max int, regate time.Duration) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.regate = regate
	seen := map[string]bool{}
	order := watchOrder(byTenant, bundle)
	clear(ws.gateways)
	for _, tm := range order { // control planes first, by tenant and id
		if tm.m.ControlPlane {
			ws.gateways[tm.tenant] = append(ws.gateways[tm.tenant], gateway{id: tm.m.ID, address: tm.m.Address})
		}
	}
	var unwatched []tenantMachine
	if max > 0 && len(order) > max {
		order, unwatched = order[:max], order[max:]
	}
	for _, tm := range order {
		tenant, b, sum, m := tm.tenant, tm.bundle, tm.sum, tm.m
		seen[m.ID] = true
		if w := ws.byID[m.ID]; w != nil {
			if w.tenant == tenant && w.sum == sum && w.m.Address == m.Address && w.m.ControlPlane == m.ControlPlane {
				continue
			}
			w.cancel()
		}
		wctx, cancel := context.WithCancel(ctx)
		ws.byID[m.ID] = &machineWatch{tenant: tenant, bundle: b, sum: sum, m: m, cancel: cancel}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			ws.pl.follow(wctx, tenant, b, m)
		}()
	}
	for id, w := range ws.byID {
		if !seen[id] {
			w.cancel()
			delete(ws.byID, id)
		}
	}
	ws.syncEvents(ctx, unwatched)
}

// stop ends every watch and waits for them.
func (ws *watchSet) stop() {
	ws.mu.Lock()
	for id, w := range ws.byID {
		w.cancel()
		delete(ws.byID, id)
	}
	for tenant, ev := range ws.events {
		ev.cancel()
		delete(ws.events, tenant)
	}
	ws.mu.Unlock()
	ws.wg.Wait()
}

// follow watches one machine until ctx ends. While the watch is open the
// machine's standing observation is the watch's, kept current by its
// events; when it breaks (the machine went away, refused the streams, or
// a stream ended) the machine is probed and the watch opened again with
// a backoff from watchRetryMin up to watchRetryMax, so that a machine
// whose watch is broken is still probed, less and less often.
func (pl *Plane) follow(ctx context.Context, tenant string, bundle []byte, m Machine) {
	retry := time.Duration(0) // the first open, and the first after a healthy watch broke, are at once
	direct := false
	for ctx.Err() == nil {
		began := time.Now()
		through := pl.watches.via(tenant, m, direct)
		err := pl.followOnce(ctx, tenant, bundle, m, through, direct)
		if ctx.Err() != nil {
			return
		}
		if through == m.Address {
			// The next open dials afresh rather than wait out a failed
			// connection's backoff. A gateway's connection is its own
			// watch's to drop.
			pl.pool.Drop(tenant, bundle, m.Address)
		}
		// A watch through a gateway that broke opens directly next, and
		// a direct one through a gateway again when there is one.
		direct = through != m.Address && !errors.Is(err, errRegate)
		if time.Since(began) > watchHealthy || errors.Is(err, errRegate) {
			retry = 0
		}
		pl.log.Debug("machine watch broken", "machine", m.ID, "through", through, "err", err, "retry", retry)
		if retry > 0 && !pause(ctx, retry) {
			return
		}
		retry = min(max(2*retry, watchRetryMin), watchRetryMax, pl.prober.TTL())
	}
}

// pause waits for d, and reports false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// followOnce opens the machine's watch, reads the machine in full, and
// follows its events until the watch breaks. A machine whose watch cannot
// be opened is probed instead (Prober.Fresh).
//
// The watch's streams run on the tenant's stream connection to through
// (Pool.Streams); its reads go through the pool's shared client of
// through, which it holds only while it reads.
//
// A worker's watch that opened directly looks for a gateway to move to
// (via): every watchRetryMin when it went direct for want of one, every
// RegateInterval when its last open through one failed (failedGateway).
func (pl *Plane) followOnce(ctx context.Context, tenant string, bundle []byte, m Machine, through string, failedGateway bool) error {
	sc, release, err := pl.pool.Streams(tenant, bundle, through)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel() // ends the streams, and their readers with them
	own := ctx
	notes := make(chan watchNote, watchEvents)
	if err := pl.openWatch(ctx, sc, m, through, notes, &readers); err != nil {
		if through == m.Address {
			pl.pool.Drop(tenant, bundle, m.Address)
			if errors.Is(err, errNoAnswer) {
				sc.Reset() // the next open dials afresh
			}
		}
		release()
		prev, had := pl.prober.Last(m.ID)
		if o := pl.prober.StandIn(own, tenant, bundle, m); !had || !sameObservation(prev, o) {
			pl.Wake()
		}
		return err
	}
	read := machineReader{pl: pl, tenant: tenant, bundle: bundle, through: through, m: m}
	obs, err := read.all(ctx)
	if err != nil {
		return err
	}
	if through != m.Address && !answeredAs(obs, m) {
		return fmt.Errorf("the control plane at %s did not forward the watch of machine %s: the machine that answered does not have its address", through, m.ID)
	}
	pl.probed(obs)
	defer pl.prober.watchOpen(m.ID)()
	pl.watches.opened(m.ID, through)
	defer pl.watches.opened(m.ID, "")
	// A direct watch moves to a gateway once one answers.
	var regate <-chan time.Time
	if through == m.Address && len(pl.watches.gatewaysFor(tenant, m)) > 0 {
		pl.watches.mu.Lock()
		every := pl.watches.regate
		pl.watches.mu.Unlock()
		if !failedGateway {
			every = min(every, watchRetryMin)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		regate = t.C
	}
	for {
		var parts refreshPart
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-regate:
			if pl.watches.via(tenant, m, false) != m.Address {
				return errRegate
			}
			continue
		case n := <-notes:
			if n.err != nil {
				return n.err
			}
			parts |= n.part
		}
		for drained := false; !drained; { // what else came meanwhile
			select {
			case n := <-notes:
				if n.err != nil {
					return n.err
				}
				parts |= n.part
			default:
				drained = true
			}
		}
		if err := read.refresh(ctx, parts); err != nil {
			return err
		}
	}
}

// answeredAs reports whether the machine that o observed has m's
// address among its own: a call forwarded by a gateway reached m, not the
// gateway itself (a gateway in maintenance mode forwards nothing).
func answeredAs(o Observation, m Machine) bool {
	want, ok := hostAddr(m.Address)
	if !ok || o.Network == nil {
		return false
	}
	for _, a := range o.Network.Addresses {
		if p, err := netip.ParsePrefix(a); err == nil && p.Addr() == want {
			return true
		}
	}
	return false
}

// errRegate ends a worker's direct watch to open it again through a
// gateway.
var errRegate = errors.New("the watch moves to a control plane that forwards it")

// watchNote is what a watch's stream tells: the part of the observation
// that changed, or the error that ended the stream.
type watchNote struct {
	part refreshPart
	err  error
}

// openWatch opens the streams of the machine's watched kinds through
// sc, of m through a gateway when through is not m's address, all sending
// to notes until ctx ends, within the prober's timeout; their readers
// join readers. A kind the machine does not serve is not watched.
func (pl *Plane) openWatch(ctx context.Context, sc *StreamConn, m Machine, through string, notes chan<- watchNote, readers *sync.WaitGroup) error {
	kinds := watchedKinds
	if m.ControlPlane {
		kinds = append(append([]watchedKind(nil), watchedKinds...), controlPlaneKinds...)
	}
	node := ""
	if through != m.Address {
		node = m.Address
	}
	// A stream opens in ctx, which it outlives; a machine that does not
	// answer would hold the open forever, so the timer cancels them all.
	opening, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(pl.prober.opts.Timeout, cancel)
	defer timer.Stop()
	type open struct {
		s    *connect.ServerStreamForClient[v1alpha1.WatchResponse]
		kind watchedKind
	}
	var opened []open
	for _, k := range kinds {
		s, err := openKind(opening, sc, node, k)
		if unserved(err) {
			continue
		}
		if err == nil && opening.Err() == nil {
			opened = append(opened, open{s, k})
			continue
		}
		cancel()
		for _, o := range opened {
			o.s.Close()
		}
		if err == nil {
			s.Close()
		}
		if !timer.Stop() && ctx.Err() == nil {
			return errNoAnswer
		}
		return errors.New(callError("watch "+k.typ, err))
	}
	if !timer.Stop() {
		for _, o := range opened {
			o.s.Close()
		}
		return errNoAnswer
	}
	for _, o := range opened {
		readers.Go(func() { readKind(ctx, o.s, o.kind, notes) })
	}
	return nil
}

// errNoAnswer is openWatch's error when the machine did not answer within
// the prober's timeout.
var errNoAnswer = errors.New("watch: the machine did not answer in time")

// openKind opens the watch of kind k, and reads its first answer, which
// says that the watch is open.
func openKind(ctx context.Context, sc *StreamConn, node string, k watchedKind) (*connect.ServerStreamForClient[v1alpha1.WatchResponse], error) {
	s, err := sc.Watch(ctx, node, k.ns, k.typ)
	if err != nil {
		return nil, err
	}
	if !s.Receive() {
		err := s.Err()
		s.Close()
		if err == nil {
			err = errors.New("the stream ended as it opened")
		}
		return nil, err
	}
	return s, nil
}

// readKind sends to notes the part of the observation that k refreshes
// for each change s tells, and the error that ends s, until ctx ends. It
// reads into one message, emptied after each, so that a watch keeps no
// resource it was told of (a machine config is tens of KiB).
func readKind(ctx context.Context, s *connect.ServerStreamForClient[v1alpha1.WatchResponse], k watchedKind, notes chan<- watchNote) {
	defer s.Close()
	send := func(n watchNote) bool {
		select {
		case notes <- n:
			return true
		case <-ctx.Done():
			return false
		}
	}
	conn, err := s.Conn()
	var msg v1alpha1.WatchResponse
	for err == nil {
		if err = conn.Receive(&msg); err != nil {
			break
		}
		for _, ev := range msg.GetEvent() {
			switch ev.GetEventType() {
			case v1alpha1.EventType_ERRORED:
				send(watchNote{err: fmt.Errorf("watch %s: %s", k.typ, ev.GetError())})
				return
			case v1alpha1.EventType_CREATED, v1alpha1.EventType_UPDATED, v1alpha1.EventType_DESTROYED:
				if !send(watchNote{part: k.part}) {
					return
				}
			}
		}
		msg.Reset()
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("ended")
	}
	send(watchNote{err: fmt.Errorf("watch %s: %w", k.typ, err)})
}

// machineReader reads a watched machine through the pool's shared client
// of through, which it holds only while it reads: a watch's connection
// carries its streams alone.
type machineReader struct {
	pl      *Plane
	tenant  string
	bundle  []byte
	through string
	m       Machine
}

// client is the shared client of r's machine, with the context of calls
// to it, and the function that hands it back.
func (r machineReader) client(ctx context.Context) (*client.Client, context.Context, func(), error) {
	c, release, err := r.pl.pool.Client(r.tenant, r.bundle, r.through)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, throughNode(ctx, r.m, r.through), release, nil
}

// all reads the machine in full, as a probe does with its whole
// inventory, within the prober's timeout, and keeps the observation. It
// fails when the machine does not answer.
func (r machineReader) all(ctx context.Context) (Observation, error) {
	c, ctx, release, err := r.client(ctx)
	if err != nil {
		return Observation{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, r.pl.prober.opts.Timeout)
	defer cancel()
	prev, _ := r.pl.prober.Last(r.m.ID)
	o := observe(ctx, c, r.m, r.pl.prober.opts.Now(), allInventory, prev)
	if !o.Connected {
		return o, errors.New(o.Error)
	}
	return o, nil
}

// refresh reads the parts of the machine's observation that changed,
// starting from its standing observation, and keeps the result.
func (r machineReader) refresh(ctx context.Context, parts refreshPart) error {
	pl, m := r.pl, r.m
	prev, ok := pl.prober.Last(m.ID)
	if !ok || !prev.Connected {
		o, err := r.all(ctx)
		if err == nil {
			pl.probed(o)
		}
		return err
	}
	c, ctx, release, err := r.client(ctx)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, pl.prober.opts.Timeout)
	defer cancel()
	o := prev
	o.At, o.Error = pl.prober.opts.Now(), ""
	var errs []error
	if parts&refreshStatus != 0 {
		errs = append(errs, o.readMachineStatus(ctx, c), o.readServices(ctx, c))
		if m.ControlPlane {
			parts |= refreshEtcd
		}
		if o.TalosStage != prev.TalosStage {
			errs = append(errs, o.readInventory(ctx, c, prev.archOf(), allInventory))
		}
	}
	if parts&refreshConfig != 0 {
		errs = append(errs, o.readConfig(ctx, c, prev))
	}
	if parts&refreshHardware != 0 {
		errs = append(errs, o.readInventory(ctx, c, prev.archOf(), partHardware))
	}
	if parts&refreshNetwork != 0 {
		errs = append(errs, o.readInventory(ctx, c, "", partNetwork))
	}
	if parts&refreshEtcd != 0 && m.ControlPlane {
		o.Etcd = membership(etcdMembers(ctx, c), o.Hostname)
	}
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return err
		}
		// A machine that went away ends the streams too, and the watch
		// with them; until then its refusals are noted as a probe's are.
		o.Error = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	pl.probed(carryInventory(o, prev))
	return nil
}

// probed keeps o as the machine's standing observation and, when what it
// says differs from the last one, wakes the observer to write it.
func (pl *Plane) probed(o Observation) {
	prev, had := pl.prober.Last(o.Machine)
	o = pl.prober.keep(o)
	if !had || !sameObservation(prev, o) {
		pl.Wake()
	}
}

// Wake wakes the observer for a pass now: a machine's observation
// changed, a rollout's progress did, or the tenants it owns
// (ObserverOptions.Owns).
func (pl *Plane) Wake() {
	select {
	case pl.kick <- struct{}{}:
	default:
	}
}

// sameObservation compares what two observations say, not when.
func sameObservation(a, b Observation) bool {
	a.At, b.At = time.Time{}, time.Time{}
	a.LastAnswered, b.LastAnswered = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}
