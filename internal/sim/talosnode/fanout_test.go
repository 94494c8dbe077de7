package talosnode

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestUnaryFanOut: a unary call whose "nodes" header names several nodes
// (talosctl -n a,b,c) gets one response with a message of each node that
// answers, named as the client named it, and a message with the error of
// each that does not: one that refuses, and an address where no node is.
func TestUnaryFanOut(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 1, 2)
	for _, a := range append(cps, workers...) {
		waitRunning(t, h, a)
	}
	if err := h.SetFault(workers[1], Fault{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	nobody := addr(h, 250)
	c := adminClient(t, secrets, cps[0])
	names := []string{cps[0], workers[0], workers[1], nobody}
	ctx := client.WithNodes(ctxT(t), names...)
	load, err := c.MachineClient.LoadAvg(ctx, &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := c.MachineClient.Memory(ctx, &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if len(load.GetMessages()) != len(names) || len(mem.GetMessages()) != len(names) {
		t.Fatalf("%d LoadAvg and %d Memory messages, want %d of each:\n%v\n%v", len(load.GetMessages()), len(mem.GetMessages()), len(names), load, mem)
	}
	// One node named alone is fanned out too: its failure is a message.
	one, err := c.MachineClient.LoadAvg(client.WithNodes(ctxT(t), workers[1]), &emptypb.Empty{})
	if err != nil || len(one.GetMessages()) != 1 || one.GetMessages()[0].GetMetadata().GetHostname() != workers[1] || one.GetMessages()[0].GetMetadata().GetError() == "" {
		t.Errorf("LoadAvg of the refusing worker alone: %v (%v), want one message with its error", one, err)
	}
	for i, name := range names {
		l, m := load.GetMessages()[i], mem.GetMessages()[i]
		answers := i < 2
		for what, md := range map[string]interface {
			GetHostname() string
			GetError() string
		}{"LoadAvg": l.GetMetadata(), "Memory": m.GetMetadata()} {
			if md.GetHostname() != name || (md.GetError() == "") != answers {
				t.Errorf("%s message %d: metadata %v, want host name %s and an error only for a node that does not answer", what, i, md, name)
			}
		}
		if answers && (l.GetLoad1() <= 0 || m.GetMeminfo().GetMemtotal() == 0) {
			t.Errorf("%s: load %v, memory %v, want the node's gauges", name, l, m.GetMeminfo())
		}
	}
}
