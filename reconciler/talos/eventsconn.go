package talos

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"golang.org/x/net/http2"
)

// An events stream stays open for as long as the plane observes its
// tenant, one per tenant, so at a thousand tenants what each costs while
// idle is most of the plane's memory. A gRPC channel keeps six goroutines
// (three callback serializers, its reader, its writer and its keepalive)
// and a stream two more. An HTTP/2 connection keeps one, its reader, and a
// stream one, its request's: so a stream that no watch's connection
// carries (events.go) speaks gRPC's wire protocol (connect's gRPC client)
// over an HTTP/2 connection of its own, which it closes when it ends.
// Nothing else uses the connection: the probes that
// the stream's events prompt go through the pool's shared clients, which
// close when idle as for any probe.

// eventsClient is a tenant's events stream client on a connection of its
// own.
type eventsClient = connect.Client[machine.EventsRequest, machine.Event]

// eventsKeepalive is how long an events connection may stay silent before
// it is pinged, and eventsPingTimeout how long the answer may take: the
// stream's connection finds a machine that vanished without closing it as
// a shared client does (sharedDialOptions), and pings no more often than
// gRPC servers allow by default.
const (
	eventsKeepalive   = 6 * time.Minute
	eventsPingTimeout = 20 * time.Second
)

// eventsDialTimeout bounds the dial and handshake of an events
// connection, as connectParams bound a shared client's.
const eventsDialTimeout = 5 * time.Second

// eventsMaxMessage bounds an event as gRPC's clients bound a message by
// default.
const eventsMaxMessage = 4 << 20

// Events returns the events stream client of the machine at address for
// tenant, whose secrets bundle is bundle, with the credentials that Client
// uses, on a connection of its own, and the function that closes that
// connection; the client must not be used after that. The connection is
// made at the first call, not here.
func (p *Pool) Events(tenant string, bundle []byte, address string) (*eventsClient, func(), error) {
	cfg, err := p.eventsTLS(tenant, bundle)
	if err != nil {
		return nil, nil, err
	}
	addr := apidAddress(address)
	conn := &eventsConn{}
	tr := &http2.Transport{
		TLSClientConfig:    cfg,
		DialTLSContext:     conn.dial,
		ReadIdleTimeout:    eventsKeepalive,
		PingTimeout:        eventsPingTimeout,
		DisableCompression: true,
		// One request a connection: a table of its headers would only
		// hold them for the connection's life.
		MaxEncoderHeaderTableSize: 1,
	}
	hc := &http.Client{Transport: tr}
	c := connect.NewClient[machine.EventsRequest, machine.Event](hc, "https://"+addr+machine.MachineService_Events_FullMethodName,
		connect.WithGRPC(), connect.WithReadMaxBytes(eventsMaxMessage))
	var once sync.Once
	return c, func() { once.Do(conn.close) }, nil
}

// eventsTLS is the TLS of a tenant's events connections: that of its
// talosconfig, made once for the tenant's credentials.
func (p *Pool) eventsTLS(tenant string, bundle []byte) (*tls.Config, error) {
	sum := sha256.Sum256(bundle)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
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

// eventsConn is the connection of one events client: closing it ends the
// stream, and a dial after that fails.
type eventsConn struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (ec *eventsConn) dial(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: eventsDialTimeout}, Config: cfg}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if ec.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	ec.conns = append(ec.conns, c)
	return c, nil
}

func (ec *eventsConn) close() {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	ec.closed = true
	for _, c := range ec.conns {
		c.Close()
	}
	ec.conns = nil
}
