package talosnode

import (
	"container/heap"
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// scheduler wakes nodes at their next stage change, so that ports open and
// close, streams see the change, and a node that went down drops its
// connections. Only nodes in the middle of a plan have an entry: one
// goroutine and one timer serve the whole host.
type scheduler struct {
	mu   sync.Mutex
	q    wakeQueue
	kick chan struct{}
	fire func(*node)
}

type wake struct {
	at time.Time
	n  *node
}

type wakeQueue []wake

func (q wakeQueue) Len() int           { return len(q) }
func (q wakeQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q wakeQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *wakeQueue) Push(x any)        { *q = append(*q, x.(wake)) }
func (q *wakeQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	*q = old[:len(old)-1]
	return w
}

func newScheduler(fire func(*node)) *scheduler {
	return &scheduler{kick: make(chan struct{}, 1), fire: fire}
}

// add wakes n at t (on the real clock).
func (s *scheduler) add(n *node, t time.Time) {
	s.mu.Lock()
	heap.Push(&s.q, wake{at: t, n: n})
	first := s.q[0].n == n && s.q[0].at.Equal(t)
	s.mu.Unlock()
	if first {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *scheduler) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var due []*node
		now := time.Now()
		for len(s.q) > 0 && !s.q[0].at.After(now) {
			due = append(due, heap.Pop(&s.q).(wake).n)
		}
		wait := time.Hour
		if len(s.q) > 0 {
			wait = s.q[0].at.Sub(now)
		}
		s.mu.Unlock()
		for _, n := range due {
			s.fire(n)
		}
		if len(due) > 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// tick is a node's wake-up: its stage changed.
func (h *Host) tick(n *node) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n.gone.Load() {
		return
	}
	n.schedAt = time.Time{}
	h.advance(n, h.now())
	h.notify(n)
	h.syncListener(n)
	h.reschedule(n)
}

// reschedule asks for a wake-up at n's next stage change, if any. Called
// with h.mu held.
func (h *Host) reschedule(n *node) {
	now := h.now()
	next, ok := n.st.Plan.next(now)
	if n.st.Revert != nil && (!ok || n.st.TryUntil.Before(next)) {
		next, ok = n.st.TryUntil, true
	}
	if !ok || n.schedAt.Equal(next) {
		return
	}
	n.schedAt = next
	// The host's clock may be another than the real one: wake after the
	// same delay.
	h.sched.add(n, time.Now().Add(next.Sub(now)))
}

// syncListener opens n's API port while it answers and closes it (and
// drops its connections) while it is down or refuses connections. Called
// with h.mu held.
func (h *Host) syncListener(n *node) {
	v := n.viewAt(h.now())
	want := !n.gone.Load() && !v.Down && !n.fault.Refuse
	switch {
	case want && n.fd < 0:
		fd, err := h.acc.listen(netip.AddrPortFrom(n.addr, sim.TalosPort))
		if err != nil {
			if n.listenOK || n.schedAt.IsZero() {
				h.log.Warn("simulated node cannot listen", "machine", n.st.ID, "address", n.st.Address, "err", err)
			}
			n.listenOK = false
			return
		}
		n.fd, n.listenOK = fd, true
	case !want && n.fd >= 0:
		h.closeListener(n)
	}
}

// closeListener closes n's port and its connections. Called with h.mu held.
func (h *Host) closeListener(n *node) {
	if n.fd >= 0 {
		h.acc.unlisten(n.fd)
		n.fd = -1
	}
	for c := range n.conns {
		c.(*trackedConn).Conn.Close() // not c.Close: that takes h.mu
	}
	clear(n.conns)
}

// trackingListener hands the gRPC server the nodes' connections, each
// filed under its node so that a node going down drops it.
type trackingListener struct {
	net.Listener
	h *Host
}

func (l trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.h.track(c); tc != nil {
			return tc, nil
		}
	}
}

type trackedConn struct {
	net.Conn
	h      *Host
	n      *node
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.h.mu.Lock()
		delete(c.n.conns, c)
		c.h.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}

// Read and Write wait while the node is silent (Fault.Silent): what came
// in meanwhile is handed over once it speaks again.
func (c *trackedConn) Read(p []byte) (int, error) {
	if err := c.speak(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if err := c.speak(); err != nil {
		return 0, err
	}
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	if err := c.speak(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// speak returns once c's node is not silent, or at once when the host
// closes (whose server says goodbye on every connection), or
// net.ErrClosed once c was closed or dropped.
func (c *trackedConn) speak() error {
	for c.n.silent.Load() && c.h.ctx.Err() == nil {
		c.h.mu.Lock()
		_, open := c.n.conns[c]
		changed, silent := c.n.changed, c.n.fault.Silent
		c.h.mu.Unlock()
		switch {
		case !open:
			return net.ErrClosed
		case !silent:
			return nil
		}
		select {
		case <-changed:
		case <-c.closed:
			return net.ErrClosed
		case <-c.h.ctx.Done():
		}
	}
	return nil
}

// track files c under the node it reached, or closes it when that node
// does not answer any more.
func (h *Host) track(c net.Conn) net.Conn {
	addr, _ := addrOf(c.LocalAddr())
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.byAddr[addr]
	if n == nil || n.fd < 0 {
		c.Close()
		return nil
	}
	tc := &trackedConn{Conn: c, h: h, n: n, closed: make(chan struct{})}
	n.conns[tc] = struct{}{}
	return tc
}
