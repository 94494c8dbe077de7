package talos

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/proto"
)

// Past the bound on watches (DefaultMaxWatched) a machine has no watch,
// and its timed probe would learn of a change up to a probe TTL late. So
// each tenant with machines past the bound keeps one events stream
// through a control plane (the first that answers), which its apid fans
// out to the tenant's machines that have no watch, the control plane
// itself among them when it has none (the "nodes" header, as `talosctl
// events -n a,b` sends it): one stream for all of them. It runs on the
// tenant's stream connection to that control plane (Pool.Streams), which
// the watches through it share: two goroutines (its request's and the
// plane's reader), and the connection's reader while nothing else holds
// it, where a gRPC channel of its own would keep eight. A machine status or
// address event probes its machine at once, through the gateway; so does
// a machine leaving the stream (it went down), and every machine of a
// stream opened again (what changed in between). A stream's first open
// asks for the events since its machines' oldest standing observation
// (tail_seconds, up to eventsStand), so that a change between their
// reads and the stream comes too; while none of them was read yet (as at
// the start), it asks for none, and a machine read while it opened is
// probed as it joins. While a machine is on
// the stream its timed probe waits eventsStand (5 minutes) rather than the
// probe TTL: it only catches what the events do not tell (the config's
// hash, the disks, the etcd members), and the stream tells when the
// machine goes down. A machine off the stream is probed on the TTL.

// tenantEvents is a tenant's events stream.
type tenantEvents struct {
	key    [32]byte // the gateway, the bundle and the machines it covers
	gw     gateway
	bundle []byte
	ms     []Machine // the machines it covers
	cancel context.CancelFunc
}

// syncEvents starts, stops or renews the events streams: one per tenant
// that has machines in unwatched and a gateway among the watched, over
// the tenant's unwatched machines that are not in maintenance mode.
// It notes whether any of them is off the streams (leftOut). Called with
// ws.mu held.
func (ws *watchSet) syncEvents(ctx context.Context, unwatched []tenantMachine) {
	byTenant := map[string][]tenantMachine{}
	leftOut := false
	for _, tm := range unwatched {
		leftOut = leftOut || !ws.pl.prober.onStream(tm.m.ID)
		if o, ok := ws.pl.prober.Last(tm.m.ID); ok && o.Maintenance {
			continue // no gateway forwards to a machine without its config
		}
		byTenant[tm.tenant] = append(byTenant[tm.tenant], tm)
	}
	ws.leftOut.Store(leftOut)
	for tenant, tms := range byTenant {
		gw, ok := ws.eventsGateway(tenant)
		if !ok {
			delete(byTenant, tenant)
			continue
		}
		key := eventsKey(gw, tms)
		if ev := ws.events[tenant]; ev != nil {
			if ev.key == key {
				continue
			}
			ev.cancel()
		}
		ectx, cancel := context.WithCancel(ctx)
		ms := make([]Machine, len(tms))
		for i, tm := range tms {
			ms[i] = tm.m
		}
		ws.events[tenant] = &tenantEvents{key: key, gw: gw, bundle: tms[0].bundle, ms: ms, cancel: cancel}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			ws.pl.followEvents(ectx, tenant, tms[0].bundle, gw, ms)
		}()
	}
	for tenant, ev := range ws.events {
		if byTenant[tenant] == nil {
			ev.cancel()
			delete(ws.events, tenant)
		}
	}
}

// eventsGateway is the control plane through which a tenant's events
// stream opens: the first that runs and answers by its standing
// observation, or that was not observed yet. Called with ws.mu held.
func (ws *watchSet) eventsGateway(tenant string) (gateway, bool) {
	for _, g := range ws.gateways[tenant] {
		if _, seen := ws.pl.prober.Last(g.id); !seen || ws.pl.prober.forwards(g.id) {
			return g, true
		}
	}
	return gateway{}, false
}

// eventsKey identifies what an events stream covers.
func eventsKey(gw gateway, tms []tenantMachine) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%x\x00", gw.id, gw.address, tms[0].sum)
	for _, tm := range tms {
		fmt.Fprintf(h, "%s\x00%s\x00", tm.m.ID, tm.m.Address)
	}
	return [32]byte(h.Sum(nil))
}

// errNoEvents ends an events stream whose first message did not come in
// time.
var errNoEvents = errors.New("the events stream did not answer in time")

// errRejoin ends an events stream to open it again with the machines that
// left it.
var errRejoin = errors.New("the events stream opens again for the machines that left it")

// followEvents keeps the events stream of a tenant's machines ms through
// gateway gw until ctx ends: opened again at once when machines left it
// (after a backoff from watchRetryMin up to watchRetryMax, so that a
// machine that stays down costs little), and after that backoff when it
// broke.
func (pl *Plane) followEvents(ctx context.Context, tenant string, bundle []byte, gw gateway, ms []Machine) {
	retry := time.Duration(0)
	for again := false; ctx.Err() == nil; again = true {
		began := time.Now()
		err := pl.eventsOnce(ctx, tenant, bundle, gw, ms, again, max(retry, watchRetryMin))
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > watchHealthy {
			retry = 0
		}
		pl.log.Debug("tenant events stream ended", "tenant", tenant, "through", gw.address, "err", err, "retry", retry)
		if !errors.Is(err, errRejoin) && retry > 0 && !pause(ctx, retry) {
			return
		}
		retry = min(max(2*retry, watchRetryMin), watchRetryMax)
	}
}

// eventsOnce opens the events stream of ms through gw and probes each
// machine that an event says changed, until the stream breaks, or, once
// a machine left it, for rejoin more (errRejoin). With again, every
// machine is probed as it joins: the stream opens again, and what changed
// meanwhile came by no event.
func (pl *Plane) eventsOnce(ctx context.Context, tenant string, bundle []byte, gw gateway, ms []Machine, again bool, rejoin time.Duration) error {
	run := &eventsRun{pl: pl, ctx: ctx, tenant: tenant, bundle: bundle, gw: gw, again: again, left: map[string]bool{}, on: map[string]func(){}}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	run.leaving = func() { time.AfterFunc(rejoin, func() { cancel(errRejoin) }) }
	var nodes []string
	run.byNode, nodes = eventsNodes(ms)
	var (
		stream      connectEvents
		closeStream func()
		err         error
	)
	// A stream whose first message does not come within the prober's
	// timeout is on a connection that stopped answering: closed, the
	// next opens on a new one.
	answered := time.AfterFunc(pl.prober.opts.Timeout, func() { cancel(errNoEvents) })
	defer answered.Stop()
	tail := int32(0)
	if !again {
		tail = pl.eventsTail(ms)
		run.untailed = tail == 0
	}
	onFreshStack(func() { stream, closeStream, err = pl.openEvents(ctx, tenant, bundle, gw, nodes, tail) })
	if err != nil {
		return err
	}
	defer closeStream()
	defer run.leave()
	for {
		msg, err := stream.Recv()
		if err != nil {
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errRejoin):
				return cause
			case errors.Is(cause, errNoEvents):
				stream.sc.Reset()
				return fmt.Errorf("through %s: %w", gw.address, cause)
			}
			return err
		}
		answered.Stop()
		if err := run.handle(msg); err != nil {
			return err
		}
	}
}

// eventsNodes are ms by their node names in an events stream (their
// addresses, as the "nodes" header names them), and those names, sorted.
func eventsNodes(ms []Machine) (map[string]Machine, []string) {
	byNode := make(map[string]Machine, len(ms))
	nodes := make([]string, 0, len(ms))
	for _, m := range ms {
		name := m.Address
		if a, ok := hostAddr(m.Address); ok {
			name = a.String()
		}
		byNode[name] = m
		nodes = append(nodes, name)
	}
	slices.Sort(nodes)
	return byNode, nodes
}

// eventsRun is an open events stream's machines and what it did of them.
type eventsRun struct {
	pl     *Plane
	ctx    context.Context // the prompts', which outlive the stream
	tenant string
	bundle []byte
	gw     gateway
	again  bool
	// untailed is set when the stream opened without a tail, since none
	// of its machines had been read: one read while it opened, or being
	// read as it joins, is probed as it joins (after that probe), since a
	// change between that read and its joining came by no event.
	untailed bool
	byNode   map[string]Machine
	left     map[string]bool   // the machines that left the stream
	on       map[string]func() // the machines on it, and how each leaves
	// leaving is called when the first machine leaves.
	leaving func()
}

// handle acts on a message of the stream: a node's first joins it to the
// stream (and probes it, with again, or when it was read, or is being
// read, while an untailed stream opened), an error says that the node left
// it (and probes it), any other probes the node if the event says it
// changed. The error it returns ends the stream: every machine left.
func (r *eventsRun) handle(msg *machine.Event) error {
	node := msg.GetMetadata().GetHostname()
	m, ok := r.byNode[node]
	if !ok {
		return nil
	}
	switch {
	case msg.GetMetadata().GetError() != "":
		if r.left[node] {
			return nil
		}
		r.left[node] = true
		if off := r.on[node]; off != nil {
			off()
			delete(r.on, node)
		}
		r.pl.prompt(r.ctx, r.tenant, r.bundle, m, 0)
		if len(r.left) == 1 {
			r.leaving()
		}
		if len(r.left) == len(r.byNode) {
			return fmt.Errorf("every machine left the events stream through %s: %s", r.gw.address, strings.TrimSpace(msg.GetMetadata().GetError()))
		}
	case msg.GetData() == nil: // the node's part of the stream began
		if r.on[node] == nil {
			r.on[node] = r.pl.prober.onEvents(m.ID)
		}
		if r.again || r.untailed && r.pl.prober.readOrReading(m.ID) {
			r.pl.prompt(r.ctx, r.tenant, r.bundle, m, 0)
		}
	default:
		r.pl.promptFor(r.ctx, r.tenant, r.bundle, m, msg)
	}
	return nil
}

// leave takes the machines still on the stream off it.
func (r *eventsRun) leave() {
	for _, off := range r.on {
		off()
	}
}

// eventsTail is the tail_seconds of the first open of ms's events
// stream: back to the oldest of their standing observations, rounded up
// with a second to spare, so that the events of what changed since a
// machine was read come first; at most eventsStand, past which an
// observation no longer stands and its machine is probed anyway. 0 when
// none of them was read yet, as at the server's start, when a stream
// opens beside its machines' first probes: a tail then would replay the
// changes of every machine that booted lately, each a probe more than
// those first probes need. A machine read, or being read, while such a
// stream opens is probed as it joins instead (eventsRun.untailed).
func (pl *Plane) eventsTail(ms []Machine) int32 {
	now := pl.prober.opts.Now()
	oldest := time.Duration(-1)
	for _, m := range ms {
		if o, ok := pl.prober.Last(m.ID); ok {
			oldest = max(oldest, now.Sub(o.At))
		}
	}
	if oldest < 0 {
		return 0
	}
	return int32(math.Ceil(min(oldest, eventsStand).Seconds())) + 1
}

// openEvents opens the events stream of nodes through gw, on the
// tenant's stream connection to it, from the events of their last
// tailSeconds, and returns the function that closes what it opened.
func (pl *Plane) openEvents(ctx context.Context, tenant string, bundle []byte, gw gateway, nodes []string, tailSeconds int32) (connectEvents, func(), error) {
	sc, release, err := pl.pool.Streams(tenant, bundle, gw.address)
	if err != nil {
		return connectEvents{}, nil, err
	}
	s, err := sc.Events(ctx, nodes, tailSeconds)
	if err != nil {
		if errors.Is(context.Cause(ctx), errNoEvents) {
			sc.Reset()
		}
		release()
		return connectEvents{}, nil, err
	}
	return connectEvents{s, sc}, func() { s.Close(); release() }, nil
}

// connectEvents reads an events stream of a StreamConn as gRPC's clients
// read theirs: io.EOF once it ended cleanly.
type connectEvents struct {
	s  *connect.ServerStreamForClient[machine.Event]
	sc *StreamConn // the connection it runs on
}

func (c connectEvents) Recv() (*machine.Event, error) {
	if c.s.Receive() {
		return c.s.Msg(), nil
	}
	if err := c.s.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

// onFreshStack runs f on a goroutine of its own and waits for it. A
// goroutine that lasts as long as a stream keeps about the largest stack
// it ever needed (the runtime halves a stack only while a quarter of it
// is enough), so a stream's one-off deep calls, such as issuing the
// tenant's client certificate as its connection is made, run here rather
// than on the stream's goroutine: about 7 KiB less a tenant at 1,000.
func onFreshStack(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// The type URLs of the events that promptFor follows, as machinery's
// UnmarshalEvent matches them. promptFor reads only the URL: the plane
// needs no more of the event than its kind, since the probe reads what
// changed.
var (
	machineStatusEventURL = eventTypeURL(&machine.MachineStatusEvent{})
	addressEventURL       = eventTypeURL(&machine.AddressEvent{})
)

func eventTypeURL(m proto.Message) string {
	return "talos/runtime/" + string(m.ProtoReflect().Descriptor().FullName())
}

// promptFor probes m at once for an event that says it changed: a new
// machine status (its stage, which rereads the inventory when it moved,
// and its readiness) or new addresses (its network).
func (pl *Plane) promptFor(ctx context.Context, tenant string, bundle []byte, m Machine, msg *machine.Event) {
	switch msg.GetData().GetTypeUrl() {
	case machineStatusEventURL:
		pl.prompt(ctx, tenant, bundle, m, 0)
	case addressEventURL:
		pl.prompt(ctx, tenant, bundle, m, partNetwork)
	}
}

// prompt probes m now, in a goroutine of its own, so that a slow machine
// holds up no other's events, and wakes the observer to write what
// changed. The prober makes one probe of a machine at a time: a prompt
// during one waits for it.
func (pl *Plane) prompt(ctx context.Context, tenant string, bundle []byte, m Machine, inventory inventoryPart) {
	pl.watches.wg.Add(1)
	pl.watches.prompts.Add(1)
	pl.watches.prompting.Add(1)
	go func() {
		defer pl.watches.wg.Done()
		defer pl.watches.prompting.Add(-1)
		prev, had := pl.prober.Last(m.ID)
		o := pl.prober.Prompt(ctx, tenant, bundle, m, inventory)
		if ctx.Err() == nil && (!had || !sameObservation(prev, o)) {
			pl.Wake()
		}
	}()
}
