package replica

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards TCP connections on loopback to an etcd member, and can
// cut them all, as a partition between one replica and etcd would.
type proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// newProxy starts a proxy to target (host:port), closed when the test
// ends.
func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); p.Cut() })
	go p.serve()
	return p
}

// URL is the proxy's client URL.
func (p *proxy) URL() string { return "http://" + p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, d)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(d, c); d.Close() }()
		go func() { _, _ = io.Copy(c, d); c.Close() }()
	}
}

// Cut closes every connection and refuses new ones until Heal.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Heal forwards new connections again.
func (p *proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}
