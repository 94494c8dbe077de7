package talosnode

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	cosistate "github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestProxiedWatchFollowsTheNodeItNames: a watch opened through a control
// plane with a "node" header, as apid forwards it, serves the named
// worker's resources and its changes; when the worker goes down, the
// watch ends with Unavailable while the connection to the control plane
// stays up, and a watch opened again once the worker is back serves it
// again.
func TestProxiedWatchFollowsTheNodeItNames(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 1, 1)
	cp, w := cps[0], workers[0]
	waitRunning(t, h, cp)
	waitRunning(t, h, w)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c := adminClient(t, secrets, cp)
	viaCP := client.WithNode(ctx, w)

	addrs, _ := watchKind(t, viaCP, c, network.NamespaceName, network.NodeAddressType)
	cur := addrs[network.NodeAddressCurrentID]
	if cur == nil || !slices.ContainsFunc(cur.(*network.NodeAddress).TypedSpec().Addresses, func(p netip.Prefix) bool { return p.String() == w+"/8" }) {
		t.Fatalf("the forwarded watch served %v, not the worker's addresses", cur)
	}
	_, events := watchKind(t, viaCP, c, runtime.NamespaceName, runtime.MachineStatusType)
	if err := c.Reboot(viaCP); err != nil {
		t.Fatal(err)
	}
	for {
		ev := next(t, "the worker's machine status", events)
		if ev.Type == cosistate.Errored {
			if status.Code(ev.Error) != codes.Unavailable {
				t.Fatalf("the forwarded watch ended with %v, want Unavailable", ev.Error)
			}
			break
		}
	}
	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("the control plane, through the same connection, after the worker went down: %v", err)
	}
	waitRunning(t, h, w)
	eventually(t, "a forwarded watch of the worker again", func() bool {
		wctx, stop := context.WithCancel(viaCP)
		defer stop()
		ch := make(chan cosistate.Event, 16)
		return c.COSI.WatchKind(wctx, runtime.NewMachineStatus().Metadata(), ch, cosistate.WithBootstrapContents(true)) == nil && (<-ch).Type == cosistate.Created
	})
}
