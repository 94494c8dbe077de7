package talos

import (
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
)

// PoolOptions configure a Pool. Zero fields take the defaults.
type PoolOptions struct {
	// IdleTimeout is how long a client nobody uses keeps its connection.
	// Default 5 s: shorter than a probe TTL, so that the connections of
	// thousands of machines that are only probed do not stay open.
	IdleTimeout time.Duration
	// MaxIdle is how many unused clients are kept at most; beyond it the
	// least recently used one closes at once. Default DefaultMaxIdle.
	MaxIdle int
	// CertificateLifetime is how long the pool uses one client
	// certificate of a tenant before it issues a new one. The certificates
	// themselves are valid for a year. Default 24 h.
	CertificateLifetime time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultMaxIdle is how many unused clients a Pool keeps unless
// PoolOptions.MaxIdle says otherwise: enough for the machines that
// bootstraps and rollouts talk to again within seconds. A kept client
// costs about 100 KiB (its TLS connection and HTTP/2 buffers; as much
// again on the machine's side), and probes gain nothing from one, since a
// machine is probed once per probe TTL, longer than IdleTimeout.
const DefaultMaxIdle = 32

// Pool makes every connection of the server to a machine's Talos API: it
// owns their dialing, their TLS, how long they are kept, and their
// closing. It hands out four kinds of client:
//
//   - Client: shared, one per tenant and machine address, authenticated
//     with an os:admin certificate issued from the tenant's secrets
//     bundle, as a talosconfig of the tenant is. Clients left unused for
//     IdleTimeout close. Probes, bootstraps and rollouts use these.
//   - Admin: a connection of its own with the same credentials, closed
//     when handed back: for a log stream, which may last for hours, and
//     for the checks of bare-metal machines, whose failed handshakes must
//     not linger in a shared client.
//   - Maintenance: a connection of its own to a machine in maintenance
//     mode, which has no identity yet: TLS without verification, or
//     pinned to the machine's certificate (see Maintenance).
//   - Streams: shared, one per tenant and machine address, with the
//     credentials of Client, for the plane's streams that stay open for
//     as long as it observes the tenant (its events stream, the watches
//     of its watched machines): plain HTTP/2 speaking gRPC's protocol,
//     without the goroutines and buffers of a gRPC channel, closed when
//     the last stream ends (see Streams).
//
// A Pool is safe for concurrent use.
type Pool struct {
	opts PoolOptions

	mu    sync.Mutex
	creds map[string]*tenantCreds // by tenant
	conns map[connKey]*pooled
	// streams are the stream connections in use (streams.go).
	streams map[connKey]*StreamConn
	idle    *list.List // of *pooled with no users, least recently used first
	closed  bool

	stop chan struct{}
	done chan struct{}
}

// tenantCreds is the talosconfig a tenant's clients share.
type tenantCreds struct {
	bundleSum [32]byte
	cfg       *clientconfig.Config
	madeAt    time.Time
	tls       *tls.Config // of Streams, made at its first use
}

type connKey struct {
	tenant    string
	bundleSum [32]byte
	address   string
}

// keyOf is the key of the connections to tenant's machine at address
// with the secrets bundle bundle.
func keyOf(tenant string, bundle []byte, address string) connKey {
	return connKey{tenant: tenant, bundleSum: sha256.Sum256(bundle), address: address}
}

type pooled struct {
	key      connKey
	c        *client.Client
	users    int
	lastUsed time.Time
	elem     *list.Element // in idle while users == 0
}

// NewPool returns a pool and starts its janitor; Close stops it.
func NewPool(opts PoolOptions) *Pool {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 5 * time.Second
	}
	if opts.MaxIdle <= 0 {
		opts.MaxIdle = DefaultMaxIdle
	}
	if opts.CertificateLifetime <= 0 {
		opts.CertificateLifetime = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Pool{opts: opts, creds: map[string]*tenantCreds{}, conns: map[connKey]*pooled{}, streams: map[connKey]*StreamConn{}, idle: list.New(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.janitor()
	return p
}

// connectParams make a connection that failed try again soon: a machine
// that reboots is back within seconds, and gRPC's default first backoff
// of a second would add most of that to every machine of a rollout.
var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// sharedDialOptions are the gRPC options of the shared clients, which
// the machines that a rollout or a bootstrap talks to keep open for
// minutes, so that each costs little while idle:
//
//   - no read buffer of gRPC's own (32 KiB by default): the framer reads
//     from the TLS connection, which holds the record it decrypts, so a
//     buffer in front of it would only copy what TLS already buffers; at
//     1,000 tenants × 8 machines that is 11 MB less;
//   - a write buffer of 8 KiB instead of 32 KiB, shared (taken from a
//     pool while writing, none held while idle): the COSI requests of a
//     machine are a few KiB;
//   - a keepalive ping after 6 idle minutes, which finds a machine that
//     vanished without closing its connections (a powered-off VM) while
//     nothing is asked of it. gRPC servers refuse pings more often than every
//     5 minutes by default (keepalive.EnforcementPolicy), the simulated
//     nodes' among them, and close the connection of a client that sends
//     them.
var sharedDialOptions = []grpc.DialOption{
	grpc.WithConnectParams(connectParams),
	grpc.WithReadBufferSize(0),
	grpc.WithWriteBufferSize(8 << 10),
	grpc.WithSharedWriteBuffer(true),
	grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 6 * time.Minute, Timeout: 20 * time.Second}),
}

// ErrPoolClosed is returned by a closed pool.
var ErrPoolClosed = errors.New("talos client pool: closed")

// Client returns a client of the machine at address for tenant, whose
// secrets bundle is bundle, and the function that hands it back; the
// client must not be used after that. The connection is made at the first
// call, not here.
func (p *Pool) Client(tenant string, bundle []byte, address string) (*client.Client, func(), error) {
	key := keyOf(tenant, bundle, address)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrPoolClosed
	}
	pc := p.conns[key]
	if pc == nil {
		cfg, err := p.configLocked(tenant, key.bundleSum, bundle)
		if err != nil {
			return nil, nil, err
		}
		c, err := dial(address, client.WithConfig(cfg), client.WithGRPCDialOptions(sharedDialOptions...))
		if err != nil {
			return nil, nil, fmt.Errorf("talos client of %s: %w", address, err)
		}
		pc = &pooled{key: key, c: c}
		p.conns[key] = pc
	}
	if pc.elem != nil {
		p.idle.Remove(pc.elem)
		pc.elem = nil
	}
	pc.users++
	var once sync.Once
	return pc.c, func() { once.Do(func() { p.release(pc) }) }, nil
}

// Admin returns a client of the machine at address for tenant, with the
// credentials Client uses, on a connection of its own, and the function
// that closes it; the client must not be used after that. The connection
// is made at the first call, not here.
func (p *Pool) Admin(tenant string, bundle []byte, address string) (*client.Client, func(), error) {
	sum := sha256.Sum256(bundle)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, ErrPoolClosed
	}
	cfg, err := p.configLocked(tenant, sum, bundle)
	p.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	return p.own("talos client", address, client.WithConfig(cfg))
}

// Maintenance returns a client of the machine at address in maintenance
// mode, on a connection of its own, and the function that closes it: TLS
// without verification, or, with fingerprint set, verifying that the
// server's certificate has that SPKI fingerprint (as talosctl prints it).
// It shows no certificate of its own: a machine that asks for one has a
// config already, and the handshake fails at once with
// errAsksForCertificate. The connection is made at the first call.
func (p *Pool) Maintenance(address, fingerprint string) (*client.Client, func(), error) {
	if p.isClosed() {
		return nil, nil, ErrPoolClosed
	}
	cfg, err := maintenanceTLS(address, fingerprint)
	if err != nil {
		return nil, nil, err
	}
	return p.own("maintenance client", address, client.WithTLSConfig(cfg))
}

// maintenanceTLS is the TLS of a Maintenance client.
func maintenanceTLS(address, fingerprint string) (*tls.Config, error) {
	cfg := &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // maintenance mode: the machine has no identity yet; pin a fingerprint to check it
		// A machine in maintenance mode asks for no client certificate; one
		// with a config asks for its cluster's. Refusing in the handshake
		// says so at once, where a TLS 1.3 server would otherwise reject
		// the missing certificate only after the handshake, as a broken
		// connection.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, errAsksForCertificate
		},
	}
	if fingerprint != "" {
		fp, err := x509.ParseFingerprint(fingerprint)
		if err != nil {
			return nil, fmt.Errorf("machine %s: fingerprint %q: %w", address, fingerprint, err)
		}
		cfg.VerifyConnection = x509.MatchSPKIFingerprints(fp)
	}
	return cfg, nil
}

// errAsksForCertificate is the handshake error of a Maintenance client at
// a machine that asks for a client certificate.
var errAsksForCertificate = errors.New("tls: the machine asks for a client certificate: it has a config already")

// own dials a connection that is the caller's alone, and returns the
// function that closes it. what names the client in errors.
func (p *Pool) own(what, address string, auth client.OptionFunc) (*client.Client, func(), error) {
	c, err := dial(address, auth)
	if err != nil {
		return nil, nil, fmt.Errorf("%s of %s: %w", what, address, err)
	}
	var once sync.Once
	return c, func() { once.Do(func() { c.Close() }) }, nil
}

// dial makes a client of the machine at address with opts, the first of
// which authenticates it; every connection of a Pool is made here. It
// connects at its first call. Shared clients add connectParams; a
// connection of its own, which serves one call or one stream, keeps
// gRPC's defaults.
func dial(address string, opts ...client.OptionFunc) (*client.Client, error) {
	return client.New(context.Background(), append(opts, client.WithEndpoints(address))...)
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// configLocked returns the tenant's talosconfig, issuing a client
// certificate when there is none for this bundle or it is old. Called
// with p.mu held.
func (p *Pool) configLocked(tenant string, sum [32]byte, bundle []byte) (*clientconfig.Config, error) {
	now := p.opts.Now()
	if tc := p.creds[tenant]; tc != nil && tc.bundleSum == sum && now.Sub(tc.madeAt) < p.opts.CertificateLifetime {
		return tc.cfg, nil
	}
	b, err := rtalos.Talosconfig(tenant, nil, bundle, now)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	cfg, err := clientconfig.FromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: talosconfig: %w", tenant, err)
	}
	p.creds[tenant] = &tenantCreds{bundleSum: sum, cfg: cfg, madeAt: now}
	return cfg, nil
}

// release hands a client back; it becomes idle when nobody else uses it.
func (p *Pool) release(pc *pooled) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.users--
	pc.lastUsed = p.opts.Now()
	if pc.users > 0 {
		return
	}
	if p.closed || p.conns[pc.key] != pc {
		pc.c.Close()
		return
	}
	pc.elem = p.idle.PushBack(pc)
	for p.idle.Len() > p.opts.MaxIdle {
		p.dropLocked(p.idle.Front().Value.(*pooled))
	}
}

// dropLocked closes an idle client. Called with p.mu held.
func (p *Pool) dropLocked(pc *pooled) {
	p.idle.Remove(pc.elem)
	pc.elem = nil
	delete(p.conns, pc.key)
	pc.c.Close()
}

// Drop discards the client of a machine whose connection failed: the next
// Client dials afresh instead of waiting out the failed connection's
// backoff. Users of the old client keep it until they hand it back.
func (p *Pool) Drop(tenant string, bundle []byte, address string) {
	key := keyOf(tenant, bundle, address)
	p.mu.Lock()
	defer p.mu.Unlock()
	pc := p.conns[key]
	if pc == nil {
		return
	}
	if pc.elem != nil {
		p.dropLocked(pc)
		return
	}
	delete(p.conns, key)
}

// Forget closes the idle clients of a tenant and forgets its certificate,
// for a tenant that was destroyed; clients and stream connections in use
// close when handed back.
func (p *Pool) Forget(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.creds, tenant)
	for key := range p.streams {
		if key.tenant == tenant {
			delete(p.streams, key)
		}
	}
	for key, pc := range p.conns {
		if key.tenant != tenant {
			continue
		}
		if pc.elem != nil {
			p.dropLocked(pc)
		} else {
			delete(p.conns, key)
		}
	}
}

// Open returns how many shared clients the pool holds, in use or idle.
func (p *Pool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *Pool) janitor() {
	defer close(p.done)
	t := time.NewTicker(p.opts.IdleTimeout / 2)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.closeIdle()
		}
	}
}

// closeIdle closes the clients unused for IdleTimeout.
func (p *Pool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	cutoff := p.opts.Now().Add(-p.opts.IdleTimeout)
	for e := p.idle.Front(); e != nil; {
		pc := e.Value.(*pooled)
		if pc.lastUsed.After(cutoff) {
			return // the rest were used later
		}
		e = e.Next()
		p.dropLocked(pc)
	}
}

// Close closes every idle client and stops the janitor; clients in use
// close when handed back.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for p.idle.Len() > 0 {
		p.dropLocked(p.idle.Front().Value.(*pooled))
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}
