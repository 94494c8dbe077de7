package talos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The plane's long-lived streams (a tenant's events stream, the COSI
// watches of its watched machines) stay open for as long as the plane
// observes the tenant, so at a thousand tenants what they cost while idle
// is most of the plane's memory. A gRPC channel keeps six goroutines
// (three callback serializers, its reader, its writer and its keepalive)
// and each stream two more (the client's reader, and gRPC's own that ends
// the stream with its context). An HTTP/2 connection keeps one, its
// reader, and a stream two (its request's, and the plane's reader). So
// the streams speak gRPC's wire protocol (connect's gRPC client) over one
// HTTP/2 connection per tenant and machine address (Pool.Streams), shared
// by every stream through that address and closed when the last ends.
// Besides them it carries only the gauges' samples of the machines on the
// tenant's events stream, a minute apart, which would otherwise dial each
// time (unary): the calls that the streams prompt (probes, the reads of a
// watched machine) go through the pool's shared clients, which close when
// idle.

// StreamConn is a tenant's connection to one machine address for the
// plane's long-lived streams.
type StreamConn struct {
	key    connKey
	users  int
	conn   *streamDialer
	hc     *http.Client
	base   string // the URL of the machine's apid
	events *connect.Client[machine.EventsRequest, machine.Event]
	watch  *connect.Client[v1alpha1.WatchRequest, v1alpha1.WatchResponse]
}

// streamsKeepalive is how long a stream connection may stay silent before
// it is pinged, and streamsPingTimeout how long the answer may take: the
// connection finds a machine that vanished without closing it as a
// shared client does (sharedDialOptions), and pings no more often than
// gRPC servers allow by default.
const (
	streamsKeepalive   = 6 * time.Minute
	streamsPingTimeout = 20 * time.Second
)

// streamsDialTimeout bounds the dial and handshake of a stream
// connection, as connectParams bound a shared client's.
const streamsDialTimeout = 5 * time.Second

// streamsMaxMessage bounds a message as gRPC's clients bound one by
// default.
const streamsMaxMessage = 4 << 20

// Streams returns the stream connection of the machine at address for
// tenant, whose secrets bundle is bundle, with the credentials that
// Client uses, and the function that hands it back: once every user
// handed it back, it closes, its streams end, and it dials no more. The
// connection is made at the first stream, not here.
func (p *Pool) Streams(tenant string, bundle []byte, address string) (*StreamConn, func(), error) {
	key := keyOf(tenant, bundle, address)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrPoolClosed
	}
	sc := p.streams[key]
	if sc == nil {
		cfg, err := p.streamsTLSLocked(tenant, key.bundleSum, bundle)
		if err != nil {
			return nil, nil, err
		}
		sc = newStreamConn(key, cfg)
		p.streams[key] = sc
	}
	sc.users++
	var once sync.Once
	return sc, func() { once.Do(func() { p.releaseStreams(sc) }) }, nil
}

// releaseStreams hands a stream connection back, and closes it when
// nobody else uses it.
func (p *Pool) releaseStreams(sc *StreamConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sc.users--
	if sc.users > 0 {
		return
	}
	if p.streams[sc.key] == sc {
		delete(p.streams, sc.key)
	}
	sc.conn.close()
}

// StreamConns returns how many stream connections the pool holds.
func (p *Pool) StreamConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

func newStreamConn(key connKey, cfg *tls.Config) *StreamConn {
	sc := &StreamConn{key: key, conn: &streamDialer{}}
	tr := &http2.Transport{
		TLSClientConfig:    cfg,
		DialTLSContext:     sc.conn.dial,
		ReadIdleTimeout:    streamsKeepalive,
		PingTimeout:        streamsPingTimeout,
		DisableCompression: true,
		// A connection carries a handful of requests, each for hours: a
		// table of their headers would only hold them for its life.
		MaxEncoderHeaderTableSize: 1,
	}
	sc.hc, sc.base = &http.Client{Transport: tr}, "https://"+apidAddress(key.address)
	sc.events = connect.NewClient[machine.EventsRequest, machine.Event](sc.hc, sc.base+machine.MachineService_Events_FullMethodName, streamsClientOptions...)
	sc.watch = connect.NewClient[v1alpha1.WatchRequest, v1alpha1.WatchResponse](sc.hc, sc.base+v1alpha1.State_Watch_FullMethodName, streamsClientOptions...)
	return sc
}

// streamsClientOptions are the options of the calls over a stream
// connection.
var streamsClientOptions = []connect.ClientOption{connect.WithGRPC(), connect.WithReadMaxBytes(streamsMaxMessage)}

// fanOutCall makes the unary call method (a machine API method without
// arguments, such as LoadAvg) of nodes over sc's connection, with their
// addresses in the "nodes" header (talosctl -n a,b), so that the machine
// that sc reaches fans it out: one message a node in the answer, or one
// with the error in its metadata.
func fanOutCall[Res any](ctx context.Context, sc *StreamConn, method string, nodes []string) (*Res, error) {
	c := connect.NewClient[emptypb.Empty, Res](sc.hc, sc.base+method, streamsClientOptions...)
	req := connect.NewRequest(&emptypb.Empty{})
	for _, n := range nodes {
		req.Header().Add("nodes", n)
	}
	resp, err := c.CallUnary(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Events opens the events stream of nodes (the "nodes" header, as
// client.WithNodes sends it) for as long as ctx lasts, from the events of
// their last tailSeconds (talosctl events --duration) when it is not 0.
func (sc *StreamConn) Events(ctx context.Context, nodes []string, tailSeconds int32) (*connect.ServerStreamForClient[machine.Event], error) {
	req := connect.NewRequest(&machine.EventsRequest{TailSeconds: tailSeconds})
	for _, n := range nodes {
		req.Header().Add("nodes", n)
	}
	return sc.events.CallServerStream(ctx, req)
}

// Watch opens the COSI watch of the resources of type typ in namespace ns
// for as long as ctx lasts, of node when it is not "" (the "node" header,
// as client.WithNode sends it): the kind's changes, without its current
// contents, as COSI's client asks for them.
func (sc *StreamConn) Watch(ctx context.Context, node, ns, typ string) (*connect.ServerStreamForClient[v1alpha1.WatchResponse], error) {
	req := connect.NewRequest(&v1alpha1.WatchRequest{Namespace: ns, Type: typ, Options: &v1alpha1.WatchOptions{}, ApiVersion: 1})
	if node != "" {
		req.Header().Set("node", node)
	}
	return sc.watch.CallServerStream(ctx, req)
}

// QuietStream is a stream connection that read nothing for a while and
// did not answer a call in time either.
type QuietStream struct {
	Tenant, Address string
}

// CheckQuietStreams asks the machine at the end of each stream connection
// that has read nothing for quiet for its version, over that connection,
// within timeout. An idle stream connection is pinged only after 6
// minutes (streamsKeepalive), as gRPC servers allow, so a machine gone
// behind a network that drops its packets (without closing its
// connections) would keep its streams open, silent, until then. One that
// does not answer in time is reset, which ends its streams (they open
// again afresh), and returned. A stream connection that reads, such as
// one that carries the minute's samples, is not asked.
func (p *Pool) CheckQuietStreams(ctx context.Context, quiet, timeout time.Duration) []QuietStream {
	p.mu.Lock()
	var quietOnes []*StreamConn
	for _, sc := range p.streams {
		if d, open := sc.conn.quietFor(); open && d >= quiet {
			sc.users++
			quietOnes = append(quietOnes, sc)
		}
	}
	p.mu.Unlock()
	var (
		mu    sync.Mutex
		reset []QuietStream
		wg    sync.WaitGroup
		sem   = make(chan struct{}, quietChecks)
	)
	for _, sc := range quietOnes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			defer p.releaseStreams(sc)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := fanOutCall[machine.VersionResponse](cctx, sc, machine.MachineService_Version_FullMethodName, nil)
			if err == nil || ctx.Err() != nil || !errors.Is(cctx.Err(), context.DeadlineExceeded) {
				return // it answered, or failed in a way that tells it is there or gone
			}
			sc.Reset()
			mu.Lock()
			defer mu.Unlock()
			reset = append(reset, QuietStream{Tenant: sc.key.tenant, Address: sc.key.address})
		})
	}
	wg.Wait()
	return reset
}

// quietChecks bounds the calls of CheckQuietStreams at once.
const quietChecks = 32

// Reset closes the connections sc has made, and ends their streams, so
// that the next stream dials afresh: for a connection that stopped
// answering without closing (a machine that came back after a network
// partition, while the old connection waits for its keepalive).
func (sc *StreamConn) Reset() { sc.conn.closeConns() }

// streamsTLSLocked is the TLS of a tenant's stream connections: that of
// its talosconfig, made once for the tenant's credentials. Called with
// p.mu held.
func (p *Pool) streamsTLSLocked(tenant string, sum [32]byte, bundle []byte) (*tls.Config, error) {
	if _, err := p.configLocked(tenant, sum, bundle); err != nil {
		return nil, err
	}
	tc := p.creds[tenant]
	if tc.tls == nil {
		cfg, err := talosconfigTLS(tc)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: talosconfig: %w", tenant, err)
		}
		tc.tls = cfg
	}
	return tc.tls, nil
}

// talosconfigTLS is the TLS that machinery's client makes of the current
// context of a talosconfig: its CA as the only root, its certificate as
// the client's.
func talosconfigTLS(tc *tenantCreds) (*tls.Config, error) {
	ctx := tc.cfg.Contexts[tc.cfg.Context]
	if ctx == nil {
		return nil, fmt.Errorf("no context %q", tc.cfg.Context)
	}
	ca, err := base64.StdEncoding.DecodeString(ctx.CA)
	if err != nil {
		return nil, fmt.Errorf("its CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("its CA holds no certificate")
	}
	crt, err := client.CertificateFromConfigContext(ctx)
	if err != nil {
		return nil, err
	}
	if crt == nil {
		return nil, errors.New("it has no client certificate")
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{*crt}, MinVersion: tls.VersionTLS12}, nil
}

// apidAddress is address with the Talos API's port when it has none.
func apidAddress(address string) string {
	if _, _, err := net.SplitHostPort(address); err == nil {
		return address
	}
	return net.JoinHostPort(address, strconv.Itoa(constants.ApidPort))
}

// streamDialer dials the connections of one StreamConn: closing it ends
// their streams, and a dial after that fails. A connection that HTTP/2
// closes (its machine went away) leaves it.
type streamDialer struct {
	mu     sync.Mutex
	conns  map[*dialedConn]struct{}
	closed bool
}

// dialedConn is a connection of a streamDialer. lastRead is when it
// last read anything, or was dialed (sinceStart).
type dialedConn struct {
	*tls.Conn
	sd       *streamDialer
	lastRead atomic.Int64
}

func (c *dialedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.lastRead.Store(int64(sinceStart()))
	}
	return n, err
}

// started is when the process started, from which sinceStart measures
// on the monotonic clock, which a change of the wall clock does not move.
var started = time.Now()

func sinceStart() time.Duration { return time.Since(started) }

func (c *dialedConn) Close() error {
	c.sd.mu.Lock()
	delete(c.sd.conns, c)
	c.sd.mu.Unlock()
	return c.Conn.Close()
}

func (sd *streamDialer) dial(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: streamsDialTimeout}, Config: cfg}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c := &dialedConn{Conn: nc.(*tls.Conn), sd: sd}
	c.lastRead.Store(int64(sinceStart()))
	sd.mu.Lock()
	defer sd.mu.Unlock()
	if sd.closed {
		nc.Close()
		return nil, net.ErrClosed
	}
	if sd.conns == nil {
		sd.conns = map[*dialedConn]struct{}{}
	}
	sd.conns[c] = struct{}{}
	return c, nil
}

func (sd *streamDialer) close() {
	sd.mu.Lock()
	sd.closed = true
	sd.mu.Unlock()
	sd.closeConns()
}

// quietFor is how long the connections dialed so far have read nothing;
// false when none is open.
func (sd *streamDialer) quietFor() (time.Duration, bool) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	var last int64
	for c := range sd.conns {
		last = max(last, c.lastRead.Load())
	}
	return sinceStart() - time.Duration(last), len(sd.conns) > 0
}

// closeConns closes the connections dialed so far.
func (sd *streamDialer) closeConns() {
	sd.mu.Lock()
	conns := sd.conns
	sd.conns = nil
	sd.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}
