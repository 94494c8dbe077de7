package talosnode

import (
	"context"
	"net/netip"
	"slices"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Events streams the machine status and address events of the node the
// call reached, or, with a "nodes" header, of each node it names, as apid
// fans the stream out: every message then carries the node's name in its
// metadata, and a node that cannot be reached, or goes down, sends one
// message with the error in its metadata and leaves the stream, which
// goes on for the others and ends when none is left. Each node's part
// begins with an empty event, as machined's does, then sends a
// MachineStatusEvent whenever the node's stage or readiness changes and
// an AddressEvent whenever its host name or addresses do. The request's
// tail options are not kept: no past events are sent.
func (a *machineAPI) Events(_ *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	c := callOf(srv.Context())
	var mu sync.Mutex
	send := func(ev *machine.Event) error {
		mu.Lock()
		defer mu.Unlock()
		return srv.Send(ev)
	}
	if c.targets == nil {
		return a.nodeEvents(srv.Context(), c.n, "", c.proxied, send)
	}
	g, ctx := errgroup.WithContext(srv.Context())
	for _, t := range c.targets {
		g.Go(func() error {
			if t.n == nil {
				return send(&machine.Event{Metadata: &common.Metadata{Hostname: t.name, Error: "connection error: dial tcp " + t.name + ":50000: connect: connection refused"}})
			}
			return a.nodeEvents(ctx, t.n, t.name, true, send)
		})
	}
	return g.Wait()
}

// nodeEvents sends n's part of an events stream until ctx ends or, for a
// stream that apid forwards (forwarded), n goes down. name is n's name in
// the messages' metadata, "" for a stream of the node it reached.
func (a *machineAPI) nodeEvents(ctx context.Context, n *node, name string, forwarded bool, send func(*machine.Event) error) error {
	var md *common.Metadata
	if name != "" {
		md = &common.Metadata{Hostname: name}
	}
	if err := send(&machine.Event{Metadata: md}); err != nil {
		return err
	}
	var last nodeEvent
	for first := true; ; first = false {
		wait, cur, down := a.eventState(n)
		if down && forwarded {
			if name == "" {
				return errProxyBroken
			}
			return send(&machine.Event{Metadata: &common.Metadata{Hostname: name, Error: errProxyBroken.Error()}})
		}
		for _, ev := range cur.since(last, first) {
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

// nodeEvent is what a node's events report: its machine status and its
// host name and addresses.
type nodeEvent struct {
	status    runtime.MachineStatusSpec
	hostname  string
	addresses []netip.Prefix
}

// eventState returns n's state for its events, whether it is down, and
// the channel that closes at its next change.
func (a *machineAPI) eventState(n *node) (<-chan struct{}, nodeEvent, bool) {
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	ev := nodeEvent{status: h.machineStatus(n, now), hostname: n.hostname(), addresses: n.inventory().Addresses}
	down := n.gone.Load() || n.fault.Refuse || n.viewAt(now).Down
	return n.changed, ev, down
}

// since returns the events that tell what changed from last to e: on the
// first look, none (the stream sends no past events).
func (e nodeEvent) since(last nodeEvent, first bool) []*machine.Event {
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
		out = append(out, event(ms))
	}
	if e.hostname != last.hostname || !slices.Equal(e.addresses, last.addresses) {
		ae := &machine.AddressEvent{Hostname: e.hostname}
		for _, p := range e.addresses {
			ae.Addresses = append(ae.Addresses, p.Addr().String())
		}
		out = append(out, event(ae))
	}
	return out
}

// event wraps a payload as machined does, with the type URL that
// machinery's client decodes.
func event(payload proto.Message) *machine.Event {
	b, _ := proto.Marshal(payload)
	return &machine.Event{
		Data: &anypb.Any{TypeUrl: "talos/runtime/" + string(payload.ProtoReflect().Descriptor().FullName()), Value: b},
		Id:   actorID(),
	}
}
