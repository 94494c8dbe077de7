package talosnode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
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

// TestEventsReplayTheirTail: a node keeps its latest events, which an
// events stream's tail options replay after its first, empty message and
// before what happens next: tail_seconds those of the last seconds by
// the node's clock (not its boot's, an hour earlier), tail_events the
// last ones, tail_id those after the event it names; without them, none.
// As machined's, the options exclude each other: a request with two, or
// a tail_id that is no event ID, gets the node's error.
func TestEventsReplayTheirTail(t *testing.T) {
	var mu sync.Mutex
	ahead := time.Duration(0)
	h, err := Open(Options{Dir: t.TempDir(), Timings: testTimings, PollInterval: 100 * time.Millisecond, Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(ahead)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 1, 1)
	cp, w := cps[0], workers[0]
	waitRunning(t, h, cp)
	waitRunning(t, h, w)
	mu.Lock()
	ahead = time.Hour
	mu.Unlock()
	for _, f := range []Fault{{Unhealthy: "kubelet"}, {}} {
		if err := h.SetFault(w, f); err != nil {
			t.Fatal(err)
		}
	}
	c := adminClient(t, secrets, cp)
	// open opens w's events stream through cp with req and returns its
	// messages after the first, empty one.
	open := func(req *machine.EventsRequest) <-chan *machine.Event {
		t.Helper()
		ctx, cancel := context.WithCancel(ctxT(t))
		t.Cleanup(cancel)
		stream, err := c.MachineClient.Events(client.WithNodes(ctx, w), req)
		if err != nil {
			t.Fatal(err)
		}
		if msg, err := stream.Recv(); err != nil || msg.GetData() != nil {
			t.Fatalf("first message %v (%v), want an empty one", msg, err)
		}
		msgs := make(chan *machine.Event, 16)
		go func() {
			defer close(msgs)
			for msg, err := stream.Recv(); err == nil; msg, err = stream.Recv() {
				msgs <- msg
			}
		}()
		return msgs
	}
	// nextMsg returns msgs' next message.
	nextMsg := func(msgs <-chan *machine.Event, what string) *machine.Event {
		t.Helper()
		select {
		case msg, ok := <-msgs:
			if !ok {
				t.Fatalf("the stream ended before %s", what)
			}
			return msg
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s within 5 s", what)
		}
		return nil
	}
	lastID := ""
	// next returns the payload of msgs' next message, and keeps its ID.
	next := func(msgs <-chan *machine.Event, what string) any {
		t.Helper()
		msg := nextMsg(msgs, what)
		lastID = msg.GetId()
		ev, err := client.UnmarshalEvent(msg)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return ev.Payload
	}
	ready := func(p any) string {
		if ms, ok := p.(*machine.MachineStatusEvent); ok {
			return fmt.Sprintf("ready %v", ms.GetStatus().GetReady())
		}
		return fmt.Sprintf("%T", p)
	}

	bySeconds := open(&machine.EventsRequest{TailSeconds: 60})
	none := open(&machine.EventsRequest{})
	for _, want := range []string{"ready false", "ready true"} {
		if got := ready(next(bySeconds, "a replayed event")); got != want {
			t.Fatalf("tail_seconds 60: replayed %s, want MachineStatusEvents ready false then true (and none of the boot's)", got)
		}
	}
	extra := netip.MustParsePrefix("127.200.0.2/8")
	if err := h.SetInventory(w, func(inv *Inventory) { inv.Addresses = append(inv.Addresses, extra) }); err != nil {
		t.Fatal(err)
	}
	for name, msgs := range map[string]<-chan *machine.Event{"tail_seconds 60": bySeconds, "no tail": none} {
		if ae, ok := next(msgs, "the new address").(*machine.AddressEvent); !ok || !slices.Contains(ae.GetAddresses(), extra.Addr().String()) {
			t.Fatalf("%s: got %v after the replay, want the AddressEvent with %s", name, ae, extra.Addr())
		}
	}
	byCount := open(&machine.EventsRequest{TailEvents: 2})
	if got := ready(next(byCount, "the next to last event")); got != "ready true" {
		t.Fatalf("tail_events 2: first replayed %s, want the MachineStatusEvent ready", got)
	}
	readyID := lastID
	if _, ok := next(byCount, "the last event").(*machine.AddressEvent); !ok {
		t.Fatal("tail_events 2: the last replayed is not the AddressEvent")
	}
	if err := h.SetFault(w, Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	for name, msgs := range map[string]<-chan *machine.Event{"tail_events 2": byCount, "no tail": none} {
		if got := ready(next(msgs, "the unready worker's status")); got != "ready false" {
			t.Fatalf("%s: got %s, want the MachineStatusEvent not ready", name, got)
		}
	}
	afterReady := open(&machine.EventsRequest{TailId: readyID})
	if _, ok := next(afterReady, "the event after the tail_id").(*machine.AddressEvent); !ok {
		t.Fatal("tail_id of the ready status: the first replayed is not the AddressEvent after it")
	}
	if got := ready(next(afterReady, "the last event")); got != "ready false" {
		t.Fatalf("tail_id of the ready status: then replayed %s, want the MachineStatusEvent not ready", got)
	}
	for _, c := range []struct {
		req  *machine.EventsRequest
		want string
	}{
		{&machine.EventsRequest{TailSeconds: 60, TailEvents: 2}, "WithTailDuration can't be specified at the same time with WithTailEvents or WithTailID"},
		{&machine.EventsRequest{TailEvents: 2, TailId: readyID}, "WithTailID can't be specified at the same time with WithTailEvents or WithTailDuration"},
		{&machine.EventsRequest{TailId: "not-an-id"}, "error parsing tail_id"},
	} {
		msg := nextMsg(open(c.req), "the node's error")
		if msg.GetMetadata().GetHostname() != w || !strings.Contains(msg.GetMetadata().GetError(), c.want) {
			t.Errorf("%v: got %v, want the worker's error %q", c.req, msg, c.want)
		}
	}
}
