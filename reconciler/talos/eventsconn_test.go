package talos

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// TestPoolEvents: an events client of the pool streams a machine's
// events, over gRPC's wire protocol, with the tenant's credentials; the
// stream ends once the client is handed back, and the client dials no
// more; the credentials of another cluster fail the handshake (the
// tenant's CA did not sign the machine's certificate); a closed pool
// makes no client.
func TestPoolEvents(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 1, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	addr := ms[0].Address
	node, _ := hostAddr(addr)
	pool := NewPool(PoolOptions{})
	defer pool.Close()

	c, release, err := pool.Events("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	stream := openEvents(t, c, node.String())
	if !stream.Receive() {
		t.Fatalf("the first event: %v", stream.Err())
	}
	if got := stream.Msg().GetMetadata().GetHostname(); got != node.String() {
		t.Fatalf("the first event is of %q, want %q", got, node)
	}
	ended := make(chan error, 1)
	go func() {
		for stream.Receive() {
		}
		ended <- stream.Err()
	}()
	release()
	release() // a second hand-back does nothing
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the stream ended without an error once its client was handed back")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream still runs 5 s after its client was handed back")
	}
	after := openEvents(t, c, node.String())
	if after.Receive() || !errors.Is(after.Err(), net.ErrClosed) {
		t.Fatalf("a stream of a client handed back: %v, want its dial refused", after.Err())
	}

	// Another cluster's credentials: its CA signed neither side.
	other, releaseOther, err := pool.Events("other", bundle(t, "b"), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseOther()
	refused := openEvents(t, other, node.String())
	var unknown *tls.CertificateVerificationError
	if refused.Receive() || !errors.As(refused.Err(), &unknown) {
		t.Fatalf("events of a machine of another cluster: %v, want its certificate refused", refused.Err())
	}

	pool.Close()
	if _, _, err := pool.Events("acme", secrets, addr); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Events of a closed pool: %v, want ErrPoolClosed", err)
	}
}

// openEvents opens the events stream of node through c, for the test's
// life at most.
func openEvents(t *testing.T, c *eventsClient, node string) *connect.ServerStreamForClient[machine.Event] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req := connect.NewRequest(&machine.EventsRequest{})
	req.Header().Add("nodes", node)
	stream, err := c.CallServerStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	return stream
}

// TestAPIDAddress: an address without a port takes the Talos API's.
func TestAPIDAddress(t *testing.T) {
	for in, want := range map[string]string{
		"127.1.0.5":       "127.1.0.5:50000",
		"127.1.0.5:50001": "127.1.0.5:50001",
		"::1":             "[::1]:50000",
		"[::1]:50001":     "[::1]:50001",
		"node-1.example":  "node-1.example:50000",
	} {
		if got := apidAddress(in); got != want {
			t.Errorf("apidAddress(%q) = %q, want %q", in, got, want)
		}
	}
}
