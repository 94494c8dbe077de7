//go:build !linux

package talosnode

import (
	"net"
	"net/netip"
	"sync"
)

// acceptor is one net.Listener over the listening sockets of every node.
// Outside Linux each socket has a goroutine waiting in Accept.
type acceptor struct {
	mu    sync.Mutex
	next  int
	ls    map[int]net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newAcceptor() (*acceptor, error) {
	return &acceptor{ls: map[int]net.Listener{}, conns: make(chan net.Conn), done: make(chan struct{})}, nil
}

func (a *acceptor) listen(addr netip.AddrPort) (int, error) {
	l, err := net.Listen("tcp4", addr.String())
	if err != nil {
		return -1, err
	}
	a.mu.Lock()
	a.next++
	id := a.next
	a.ls[id] = l
	a.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case a.conns <- c:
			case <-a.done:
				c.Close()
				return
			}
		}
	}()
	return id, nil
}

func (a *acceptor) unlisten(id int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.ls[id]; l != nil {
		l.Close()
		delete(a.ls, id)
	}
}

func (a *acceptor) Accept() (net.Conn, error) {
	select {
	case c := <-a.conns:
		return c, nil
	case <-a.done:
		return nil, net.ErrClosed
	}
}

func (a *acceptor) Close() error {
	a.once.Do(func() {
		a.mu.Lock()
		for id, l := range a.ls {
			l.Close()
			delete(a.ls, id)
		}
		a.mu.Unlock()
		close(a.done)
	})
	return nil
}

func (a *acceptor) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
