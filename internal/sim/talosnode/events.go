package talosnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/xid"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Events streams the machine status and address events of the node the
// call reached, or, with a "nodes" header, of each node it names, as apid
// fans the stream out: every message then carries the node's name in its
// metadata, and a node that cannot be reached, goes down, or refuses the
// request's tail options, sends one message with the error in its
// metadata and leaves the stream, which
// goes on for the others and ends when none is left. Each node's part
// begins with an empty event, as machined's does, then sends the past
// events that the request's tail options ask for (tailOf), then a
// MachineStatusEvent whenever the node's stage or readiness changes and
// an AddressEvent whenever its host name or addresses do.
func (a *machineAPI) Events(req *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	c := callOf(srv.Context())
	a.h.mu.Lock()
	delay := c.n.fault.EventsDelay
	a.h.mu.Unlock()
	select {
	case <-srv.Context().Done():
		return nil
	case <-time.After(delay):
	}
	var mu sync.Mutex
	send := func(ev *machine.Event) error {
		mu.Lock()
		defer mu.Unlock()
		return srv.Send(ev)
	}
	if c.targets == nil {
		return a.nodeEvents(srv.Context(), c.n, "", c.proxied, req, send)
	}
	g, ctx := errgroup.WithContext(srv.Context())
	for _, t := range c.targets {
		g.Go(func() error {
			if t.n == nil {
				return send(&machine.Event{Metadata: &common.Metadata{Hostname: t.name, Error: "connection error: dial tcp " + t.name + ":50000: connect: connection refused"}})
			}
			return a.nodeEvents(ctx, t.n, t.name, true, req, send)
		})
	}
	return g.Wait()
}

// nodeEvents sends n's part of an events stream until ctx ends or, for a
// stream that apid forwards (forwarded), n goes down. name is n's name in
// the messages' metadata, "" for a stream of the node it reached.
func (a *machineAPI) nodeEvents(ctx context.Context, n *node, name string, forwarded bool, req *machine.EventsRequest, send func(*machine.Event) error) error {
	var md *common.Metadata
	if name != "" {
		md = &common.Metadata{Hostname: name}
	}
	if err := send(&machine.Event{Metadata: md}); err != nil {
		return err
	}
	var last nodeEvent
	for first := true; ; first = false {
		wait, cur, down, past, err := a.eventState(n, req, first)
		if err != nil {
			return leave(name, status.Error(codes.Unknown, err.Error()), send)
		}
		if down && forwarded {
			return leave(name, errProxyBroken, send)
		}
		for _, le := range past {
			// Logged events are shared by the streams: each sends its own.
			if err := send(&machine.Event{Metadata: md, Data: le.ev.Data, Id: le.ev.Id}); err != nil {
				return err
			}
		}
		for _, ev := range cur.since(last, first, a.h.now()) {
			ev.Metadata = md
			if err := send(ev); err != nil {
				return err
			}
		}
		last = cur
		select {
		case <-ctx.Done():
			return nil
		case <-wait:
		}
	}
}

// leave ends a node's part of an events stream with err: the stream's
// error for the node it reached (name ""), else a message with the error
// in its metadata, as apid sends for a node whose stream failed.
func leave(name string, err error, send func(*machine.Event) error) error {
	if name == "" {
		return err
	}
	return send(&machine.Event{Metadata: &common.Metadata{Hostname: name, Error: err.Error()}})
}

// nodeEvent is what a node's events report: its machine status and its
// host name and addresses.
type nodeEvent struct {
	status    runtime.MachineStatusSpec
	hostname  string
	addresses []netip.Prefix
}

// eventState returns n's state for its events, whether it is down, the
// channel that closes at its next change, and, on the first look, the
// logged events that req's tail options ask for, or what is wrong with
// them.
func (a *machineAPI) eventState(n *node, req *machine.EventsRequest, first bool) (<-chan struct{}, nodeEvent, bool, []loggedEvent, error) {
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	ev, down := h.eventAt(n, now)
	var past []loggedEvent
	var err error
	if first {
		past, err = tailOf(n.events, req, now)
	}
	return n.changed, ev, down, past, err
}

// eventAt is n's state for its events at now, and whether it is down.
// Called with h.mu held.
func (h *Host) eventAt(n *node, now time.Time) (nodeEvent, bool) {
	ev := nodeEvent{status: h.machineStatus(n, now), hostname: n.hostname(), addresses: n.inventory().Addresses}
	down := n.gone.Load() || n.fault.Refuse || n.viewAt(now).Down
	return ev, down
}

// eventsKept is how many of its latest events a node keeps for the tail
// options of events streams, as machined keeps its latest in a ring.
const eventsKept = 32

// loggedEvent is an event a node keeps, with its ID, which tells when
// it happened (to the second) and orders it, as machined's xid IDs do.
// Its event has no metadata and is never changed.
type loggedEvent struct {
	id xid.ID
	ev *machine.Event
}

// notify wakes the streams that wait for a change of n and logs the
// events the change makes. Called with h.mu held.
func (h *Host) notify(n *node) {
	n.notify()
	h.logEvents(n)
}

// logEvents keeps the events that tell how n changed since it last
// logged, the last eventsKept of them. The first time, that is its whole
// state, as the events of a boot tell it. Called with h.mu held.
func (h *Host) logEvents(n *node) {
	if n.gone.Load() {
		return
	}
	now := h.now()
	h.logging = true
	cur, _ := h.eventAt(n, now)
	h.logging = false
	for _, ev := range cur.since(n.logged, false, now) {
		id, _ := xid.FromString(ev.Id)
		n.events = append(n.events, loggedEvent{id: id, ev: ev})
	}
	if over := len(n.events) - eventsKept; over > 0 {
		n.events = slices.Delete(n.events, 0, over)
	}
	n.logged = cur
}

// tailOf returns the events of log (oldest first) that an events
// request's tail options ask for, as machined reads its ring: the last
// tail_events (all that are kept for -1), those after the event tail_id
// names, or those of the last tail_seconds, by their IDs' time; none
// without an option. The options exclude each other, and the error says
// so in machined's words.
func tailOf(log []loggedEvent, req *machine.EventsRequest, now time.Time) ([]loggedEvent, error) {
	count, seconds := int(req.GetTailEvents()), req.GetTailSeconds()
	var after xid.ID
	if req.GetTailId() != "" {
		id, err := xid.FromString(req.GetTailId())
		if err != nil {
			return nil, fmt.Errorf("error parsing tail_id: %w", err)
		}
		after = id
	}
	switch {
	case count != 0 && !after.IsNil():
		return nil, errors.New("WithTailID can't be specified at the same time with WithTailEvents or WithTailDuration")
	case seconds != 0 && (count != 0 || !after.IsNil()):
		return nil, errors.New("WithTailDuration can't be specified at the same time with WithTailEvents or WithTailID")
	}
	from := len(log)
	switch {
	case count < 0:
		from = 0
	case count > 0:
		from = max(len(log)-count, 0)
	case !after.IsNil():
		from = firstOf(log, func(e loggedEvent) bool { return e.id.Compare(after) > 0 })
	case seconds != 0:
		since := now.Add(-time.Duration(seconds) * time.Second)
		from = firstOf(log, func(e loggedEvent) bool { return e.id.Time().After(since) })
	}
	return slices.Clone(log[from:]), nil
}

// firstOf is the index of the first event of log for which after holds,
// which then holds for every later one; len(log) when there is none.
func firstOf(log []loggedEvent, after func(loggedEvent) bool) int {
	return sort.Search(len(log), func(i int) bool { return after(log[i]) })
}

// since returns the events that tell what changed from last to e, with
// IDs of now: on the first look, none (the stream sends no past events).
func (e nodeEvent) since(last nodeEvent, first bool, now time.Time) []*machine.Event {
	if first {
		return nil
	}
	var out []*machine.Event
	if e.status.Stage != last.status.Stage || e.status.Status.Ready != last.status.Status.Ready || !slices.Equal(e.status.Status.UnmetConditions, last.status.Status.UnmetConditions) {
		ms := &machine.MachineStatusEvent{
			Stage:  machine.MachineStatusEvent_MachineStage(e.status.Stage),
			Status: &machine.MachineStatusEvent_MachineStatus{Ready: e.status.Status.Ready},
		}
		for _, u := range e.status.Status.UnmetConditions {
			ms.Status.UnmetConditions = append(ms.Status.UnmetConditions, &machine.MachineStatusEvent_MachineStatus_UnmetCondition{Name: u.Name, Reason: u.Reason})
		}
		out = append(out, event(ms, now))
	}
	if e.hostname != last.hostname || !slices.Equal(e.addresses, last.addresses) {
		ae := &machine.AddressEvent{Hostname: e.hostname}
		for _, p := range e.addresses {
			ae.Addresses = append(ae.Addresses, p.Addr().String())
		}
		out = append(out, event(ae, now))
	}
	return out
}

// event wraps a payload as machined does, with the type URL that
// machinery's client decodes and an xid of now.
func event(payload proto.Message, now time.Time) *machine.Event {
	b, _ := proto.Marshal(payload)
	return &machine.Event{
		Data: &anypb.Any{TypeUrl: "talos/runtime/" + string(payload.ProtoReflect().Descriptor().FullName()), Value: b},
		Id:   xid.NewWithTime(now).String(),
	}
}
