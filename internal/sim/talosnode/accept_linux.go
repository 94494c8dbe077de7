//go:build linux

package talosnode

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
)

// acceptor is one net.Listener over the listening sockets of every node:
// one epoll set and one goroutine wait for connections on all of them, so
// that an idle node costs a socket and nothing else. The gRPC server
// serves it like any listener.
type acceptor struct {
	epfd int
	wake [2]int // a pipe that interrupts epoll_wait on Close

	mu     sync.Mutex
	fds    map[int]bool
	closed bool

	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newAcceptor() (*acceptor, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	a := &acceptor{epfd: epfd, fds: map[int]bool{}, conns: make(chan net.Conn), done: make(chan struct{})}
	if err := syscall.Pipe2(a.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(a.wake[0])}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, a.wake[0], &ev); err != nil {
		a.closeFDs()
		return nil, fmt.Errorf("epoll: %w", err)
	}
	go a.loop()
	return a, nil
}

// listen opens a listening socket on addr and returns it.
func (a *acceptor) listen(addr netip.AddrPort) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int, error) {
		syscall.Close(fd)
		return -1, os.NewSyscallError("listen "+addr.String(), err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
		return fail(err)
	}
	if err := syscall.Listen(fd, 128); err != nil {
		return fail(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fail(net.ErrClosed)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
	if err := syscall.EpollCtl(a.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fail(err)
	}
	a.fds[fd] = true
	return fd, nil
}

// unlisten closes a listening socket: new connections are refused, and
// the ones in its backlog reset.
func (a *acceptor) unlisten(fd int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.fds[fd] {
		return
	}
	delete(a.fds, fd)
	syscall.EpollCtl(a.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	syscall.Close(fd)
}

func (a *acceptor) loop() {
	defer a.closeFDs()
	events := make([]syscall.EpollEvent, 64)
	for {
		k, err := syscall.EpollWait(a.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:k] {
			if int(ev.Fd) == a.wake[0] {
				return
			}
			for _, c := range a.accept(int(ev.Fd)) {
				select {
				case a.conns <- c:
				case <-a.done:
					c.Close()
					return
				}
			}
		}
	}
}

// accept takes the pending connections of a listening socket.
func (a *acceptor) accept(fd int) []net.Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.fds[fd] {
		return nil
	}
	var out []net.Conn
	for {
		nfd, _, err := syscall.Accept4(fd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return out // EAGAIN: no more; other errors: the client went away
		}
		f := os.NewFile(uintptr(nfd), "tcp")
		c, err := net.FileConn(f)
		f.Close()
		if err == nil {
			out = append(out, c)
		}
	}
}

// Accept implements net.Listener.
func (a *acceptor) Accept() (net.Conn, error) {
	select {
	case c := <-a.conns:
		return c, nil
	case <-a.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: every listening socket closes.
func (a *acceptor) Close() error {
	a.once.Do(func() {
		a.mu.Lock()
		a.closed = true
		for fd := range a.fds {
			syscall.Close(fd)
		}
		a.fds = map[int]bool{}
		a.mu.Unlock()
		// Wake the loop before it may see done: it closes the pipe on
		// its way out.
		syscall.Write(a.wake[1], []byte{0})
		close(a.done)
	})
	return nil
}

func (a *acceptor) closeFDs() {
	syscall.Close(a.epfd)
	syscall.Close(a.wake[0])
	syscall.Close(a.wake[1])
}

// Addr implements net.Listener.
func (a *acceptor) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
