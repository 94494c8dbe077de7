package talos

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// TestPoolStreams: the stream connection of a tenant's machine is one
// for all its users; over gRPC's wire protocol, with the tenant's
// credentials, it streams the machine's events and a COSI watch that
// tells a change of the machine's status, and an events stream with a
// tail replays the change that came before it; its streams end once every
// user handed it back, and it dials no more; the credentials of another
// cluster fail the handshake (the tenant's CA did not sign the machine's
// certificate); a closed pool makes no connection.
func TestPoolStreams(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 1, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	addr := ms[0].Address
	node, _ := hostAddr(addr)
	pool := NewPool(PoolOptions{})
	defer pool.Close()

	sc, release, err := pool.Streams("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	again, releaseAgain, err := pool.Streams("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	if again != sc || pool.StreamConns() != 1 {
		t.Fatalf("two Streams of one machine: the same %v, %d held; want the same, 1", again == sc, pool.StreamConns())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := sc.Events(ctx, []string{node.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	if !events.Receive() {
		t.Fatalf("the first event: %v", events.Err())
	}
	if got := events.Msg().GetMetadata().GetHostname(); got != node.String() {
		t.Fatalf("the first event is of %q, want %q", got, node)
	}
	watch, err := sc.Watch(ctx, "", runtime.NamespaceName, runtime.MachineStatusType)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if !watch.Receive() || len(watch.Msg().GetEvent()) != 0 {
		t.Fatalf("the watch's first answer: %v, %v; want none, no events", watch.Err(), watch.Msg().GetEvent())
	}
	if err := r.host.SetFault(ms[0].ID, talosnode.Fault{Unhealthy: "kubelet"}); err != nil {
		t.Fatal(err)
	}
	if !watch.Receive() {
		t.Fatalf("the watch after the machine turned unhealthy: %v", watch.Err())
	}
	if evs := watch.Msg().GetEvent(); len(evs) != 1 || evs[0].GetEventType() != v1alpha1.EventType_UPDATED || evs[0].GetResource().GetMetadata().GetType() != runtime.MachineStatusType {
		t.Fatalf("the watch after the machine turned unhealthy told %v, want MachineStatus updated", evs)
	}
	tail, err := sc.Events(ctx, []string{node.String()}, 60)
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	for replayed := false; !replayed; {
		if !tail.Receive() {
			t.Fatalf("a stream with a tail of 60 s ended before the unhealthy machine's status: %v", tail.Err())
		}
		if ev, err := client.UnmarshalEvent(tail.Msg()); err == nil {
			ms, ok := ev.Payload.(*machine.MachineStatusEvent)
			replayed = ok && slices.ContainsFunc(ms.GetStatus().GetUnmetConditions(), func(c *machine.MachineStatusEvent_MachineStatus_UnmetCondition) bool {
				return strings.Contains(c.GetReason(), "kubelet not healthy")
			})
		}
	}

	ended := make(chan error, 1)
	go func() {
		for events.Receive() {
		}
		ended <- events.Err()
	}()
	release()
	release() // a second hand-back does nothing
	select {
	case err := <-ended:
		t.Fatalf("the stream ended while a user still held its connection: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	releaseAgain()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the stream ended without an error once its connection was handed back")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream still runs 5 s after its connection was handed back")
	}
	if n := pool.StreamConns(); n != 0 {
		t.Fatalf("%d stream connections held once handed back, want 0", n)
	}
	after, err := sc.Events(ctx, []string{node.String()}, 0)
	if err == nil {
		defer after.Close()
		if after.Receive() {
			t.Fatal("a stream of a connection handed back received")
		}
		err = after.Err()
	}
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a stream of a connection handed back: %v, want its dial refused", err)
	}

	// Another cluster's credentials: its CA signed neither side.
	other, releaseOther, err := pool.Streams("other", bundle(t, "b"), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseOther()
	refused, err := other.Events(ctx, []string{node.String()}, 0)
	if err == nil {
		defer refused.Close()
		refused.Receive()
		err = refused.Err()
	}
	var unknown *tls.CertificateVerificationError
	if !errors.As(err, &unknown) {
		t.Fatalf("events of a machine of another cluster: %v, want its certificate refused", err)
	}

	pool.Close()
	if _, _, err := pool.Streams("acme", secrets, addr); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Streams of a closed pool: %v, want ErrPoolClosed", err)
	}
}

// TestUnservedStreamError: a kind that a machine does not serve, refused
// on a StreamConn's stream, reads as unserved, with its message.
func TestUnservedStreamError(t *testing.T) {
	err := connect.NewError(connect.CodeUnimplemented, errors.New("no such resource"))
	if !unserved(err) || codeOf(err) != 12 {
		t.Fatalf("unserved(%v) = %v, code %v; want true, Unimplemented", err, unserved(err), codeOf(err))
	}
	if got := callError("watch Disks", err); got != "watch Disks: no such resource" {
		t.Fatalf("callError = %q", got)
	}
	if unserved(connect.NewError(connect.CodeUnavailable, errors.New("down"))) {
		t.Fatal("an unavailable machine reads as not serving the kind")
	}
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

// TestWatchOpensAfreshPastAStalledConnection: when the connection that a
// control plane's watch would open on has stopped answering without
// closing (the machine answers on new ones, as after a network
// partition), the open that times out closes it, and the next opens on a
// new connection at once, rather than wait for the old one's keepalive.
// The stream that the stalled connection carried ends with it.
func TestWatchOpensAfreshPastAStalledConnection(t *testing.T) {
	r := newRig(t)
	tr := r.formed("acme", 1, 0)
	cp := &tr.ms[0]
	events := stalledStreams(t, r, "acme", tr.secrets, &cp.Address)
	tr.putMachines()
	tr.putTenant()
	r.observeWith(t, time.Hour, ObserverOptions{Interval: time.Hour, Watch: true, Bundle: func(string) []byte { return tr.secrets }})
	// The first open waits out the prober's timeout (2 s) on the stalled
	// connection; the second, at once, dials. Without that, every open
	// would wait on it until its keepalive, minutes later.
	within(t, 10*time.Second, "the control plane watched on a new connection", func() bool { return r.plane.watchedNow(cp.ID) })
	if events.Receive() || events.Err() == nil {
		t.Fatalf("the stream on the stalled connection: %v, want it ended with an error", events.Err())
	}
}

// stalledStreams puts a stallProxy in front of the machine at *address
// and points *address at it, holds the tenant's stream connection to it
// for the test's life, with an events stream that received its first
// message, and stalls that connection: the machine answers new ones only.
// It returns the stream.
func stalledStreams(t *testing.T, r *rig, tenant string, secrets []byte, address *string) *connect.ServerStreamForClient[machine.Event] {
	t.Helper()
	proxy := newStallProxy(t, apidAddress(*address))
	*address = proxy.addr()
	sc, release, err := r.pool.Streams(tenant, secrets, *address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	events, err := sc.Events(ctx, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { events.Close() })
	if !events.Receive() {
		t.Fatalf("the first event through the proxy: %v", events.Err())
	}
	proxy.stall()
	return events
}

// stallProxy forwards TCP connections to a target until stall, after which
// the connections it forwarded so far carry nothing more, without
// closing; those it accepts later are forwarded.
type stallProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled chan struct{} // closed by stall, for the connections so far
	done    chan struct{}
}

// newStallProxy listens on target's host, so that the target's
// certificate, made for its address, holds for the proxy's too.
func newStallProxy(t *testing.T, target string) *stallProxy {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{t: t, ln: ln, target: target, stalled: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { close(p.done); ln.Close() })
	go p.serve()
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.stalled)
	p.stalled = make(chan struct{})
}

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		stalled := p.stalled
		p.mu.Unlock()
		go p.pipe(u, c, stalled)
		go p.pipe(c, u, stalled)
	}
}

// pipe copies src to dst until either fails, or, once stalled, holds
// what it read until the test ends.
func (p *stallProxy) pipe(dst, src net.Conn, stalled <-chan struct{}) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-stalled:
			<-p.done
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
