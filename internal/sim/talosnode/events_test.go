package talosnode

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// TestEventsFanOutToTheNodesItNames: an events stream opened through a
// control plane with a "nodes" header, as apid fans it out, begins with
// an empty event for each named node and an error for a name no node
// has, then brings a worker's turn to unready as a MachineStatusEvent and
// another's new address as an AddressEvent, each under the node's name; a
// worker that goes down sends an error and leaves the stream, which goes
// on for the other.
func TestEventsFanOutToTheNodesItNames(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 1, 2)
	cp, w1, w2 := cps[0], workers[0], workers[1]
	for _, a := range []string{cp, w1, w2} {
		waitRunning(t, h, a)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c := adminClient(t, secrets, cp)
	stream, err := c.MachineClient.Events(client.WithNodes(ctx, w1, w2, "nowhere"), &machine.EventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *machine.Event, 64)
	go func() {
		defer close(msgs)
		for {
			msg, err := stream.Recv()
			if err != nil {
				return
			}
			msgs <- msg
		}
	}()
	// next returns the next message that pick accepts, skipping others.
	next := func(what string, pick func(*machine.Event) bool) *machine.Event {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case msg, ok := <-msgs:
				if !ok {
					t.Fatalf("the stream ended before %s", what)
				}
				if pick(msg) {
					return msg
				}
			case <-timeout:
				t.Fatalf("no %s within 5 s", what)
			}
		}
	}
	began := map[string]bool{}
	for range 3 {
		msg := next("a node's first message", func(*machine.Event) bool { return true })
		md := msg.GetMetadata()
		switch {
		case md.GetHostname() == "nowhere" && md.GetError() != "":
		case (md.GetHostname() == w1 || md.GetHostname() == w2) && msg.GetData() == nil && md.GetError() == "":
		default:
			t.Fatalf("first messages: got %v", msg)
		}
		began[md.GetHostname()] = true
	}
	if len(began) != 3 {
		t.Fatalf("first messages from %v, want one from each of %s, %s and nowhere", began, w1, w2)
	}

	if err := h.SetFault(w1, Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	msg := next("the unready worker's machine status", func(m *machine.Event) bool { return m.GetMetadata().GetHostname() == w1 })
	ev, err := client.UnmarshalEvent(msg)
	if err != nil {
		t.Fatal(err)
	}
	ms, ok := ev.Payload.(*machine.MachineStatusEvent)
	if !ok || ms.GetStatus().GetReady() || len(ms.GetStatus().GetUnmetConditions()) == 0 {
		t.Fatalf("the unready worker sent %T %v, want a MachineStatusEvent not ready", ev.Payload, ev.Payload)
	}

	extra := netip.MustParsePrefix("127.200.0.2/8")
	if err := h.SetInventory(w2, func(inv *Inventory) { inv.Addresses = append(inv.Addresses, extra) }); err != nil {
		t.Fatal(err)
	}
	msg = next("the other worker's addresses", func(m *machine.Event) bool { return m.GetMetadata().GetHostname() == w2 })
	ev, err = client.UnmarshalEvent(msg)
	if err != nil {
		t.Fatal(err)
	}
	if ae, ok := ev.Payload.(*machine.AddressEvent); !ok || !slices.Contains(ae.GetAddresses(), extra.Addr().String()) {
		t.Fatalf("the worker with a new address sent %T %v, want an AddressEvent with %s", ev.Payload, ev.Payload, extra.Addr())
	}

	if err := h.SetFault(w2, Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	msg = next("the refusing worker's error", func(m *machine.Event) bool { return m.GetMetadata().GetHostname() == w2 })
	if msg.GetMetadata().GetError() == "" {
		t.Fatalf("the refusing worker sent %v, want an error", msg)
	}
	if err := h.SetFault(w1, Fault{}); err != nil {
		t.Fatal(err)
	}
	msg = next("the ready worker's machine status", func(m *machine.Event) bool { return m.GetMetadata().GetHostname() == w1 })
	if ev, err := client.UnmarshalEvent(msg); err != nil || !ev.Payload.(*machine.MachineStatusEvent).GetStatus().GetReady() {
		t.Fatalf("the worker ready again sent %v (%v), want a MachineStatusEvent ready", msg, err)
	}
}
