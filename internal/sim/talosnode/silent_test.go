package talosnode

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSilentFault: a silent node keeps its connections open but answers
// nothing on them, and a new connection's handshake hangs; a call made
// meanwhile is answered once the fault clears, as after a partition.
func TestSilentFault(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 12)
	if err := h.Boot("vm-silent", a, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	c := adminClient(t, secrets, a)
	version := func(c *client.Client, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := c.Version(ctx)
		return err
	}
	if err := version(c, 5*time.Second); err != nil {
		t.Fatalf("Version before the fault: %v", err)
	}
	if err := WriteFaults(h.Dir(), Faults{a: {Silent: true}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node silent on an open connection", func() bool {
		return status.Code(version(c, 200*time.Millisecond)) == codes.DeadlineExceeded
	})
	if err := version(adminClient(t, secrets, a), time.Second); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Version on a new connection to a silent node: %v, want no answer in time", err)
	}
	inFlight := make(chan error, 1)
	go func() { inFlight <- version(c, 10*time.Second) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-inFlight:
		t.Fatalf("a call to a silent node ended before the fault cleared: %v", err)
	default:
	}
	if err := WriteFaults(h.Dir(), Faults{}); err != nil {
		t.Fatal(err)
	}
	if err := <-inFlight; err != nil {
		t.Fatalf("a call made while the node was silent, once it speaks: %v, want its answer", err)
	}
	if err := version(c, 5*time.Second); err != nil {
		t.Fatalf("Version once the fault cleared: %v", err)
	}
}
