package talosnode

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	cosistate "github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWatchBrokenFault: a node whose fault breaks watches ends its open
// COSI watches with Unavailable and refuses new ones, while Version,
// COSI Get and List keep answering; once the fault is cleared, watches
// work again.
func TestWatchBrokenFault(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 11)
	if err := h.Boot("vm-wb", a, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c := adminClient(t, secrets, a)
	_, statusEvents := watchKind(t, ctx, c, runtime.NamespaceName, runtime.MachineStatusType)
	_, diskEvents := watchKind(t, ctx, c, block.NamespaceName, block.DiskType)

	if err := WriteFaults(h.Dir(), Faults{a: {WatchBroken: true}}); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]chan cosistate.Event{"machine status": statusEvents, "disks": diskEvents} {
		ev := next(t, what, ch)
		if ev.Type != cosistate.Errored || status.Code(unwrapStatus(ev.Error)) != codes.Unavailable {
			t.Fatalf("the %s watch got %s %v, want an Unavailable error", what, ev.Type, ev.Error)
		}
	}
	if _, err := watchOnce(ctx, c); status.Code(unwrapStatus(err)) != codes.Unavailable {
		t.Fatalf("a new watch while broken: %v, want Unavailable", err)
	}
	if _, err := c.Version(ctx); err != nil {
		t.Errorf("Version while watches are broken: %v", err)
	}
	if _, err := machineStatus(ctx, c); err != nil {
		t.Errorf("COSI Get while watches are broken: %v", err)
	}
	if l, err := safe.StateListAll[*block.Disk](ctx, c.COSI); err != nil || l.Len() != 1 {
		t.Errorf("COSI List while watches are broken: %v", err)
	}

	if err := WriteFaults(h.Dir(), Faults{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watches let in again", func() bool {
		ev, err := watchOnce(ctx, c)
		return err == nil && ev.Type == cosistate.Created
	})
}

// watchOnce opens a MachineStatus kind watch and returns its first event,
// or the error that refused or ended it.
func watchOnce(ctx context.Context, c *client.Client) (cosistate.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan cosistate.Event, 4)
	if err := c.COSI.WatchKind(ctx, resource.NewMetadata(runtime.NamespaceName, runtime.MachineStatusType, "", resource.VersionUndefined), ch, cosistate.WithBootstrapContents(true)); err != nil {
		return cosistate.Event{}, err
	}
	select {
	case ev := <-ch:
		if ev.Type == cosistate.Errored {
			return ev, ev.Error
		}
		return ev, nil
	case <-ctx.Done():
		return cosistate.Event{}, ctx.Err()
	}
}

// unwrapStatus finds the gRPC status error inside err.
func unwrapStatus(err error) error {
	for e := err; e != nil; {
		if _, ok := status.FromError(e); ok {
			return e
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return err
}
