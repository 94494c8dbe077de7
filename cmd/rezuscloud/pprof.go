package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofListener serves Go's runtime profiles (net/http/pprof: heap,
// goroutine, CPU profile, trace, ...) for --pprof-listen on a listener and
// mux of its own, never on the API's. It has no authentication: a profile
// shows the server's memory layout and a trace its timings, so it binds
// loopback addresses only (reach it with ssh -L or kubectl port-forward).
type pprofListener struct {
	ln  net.Listener
	srv *http.Server
}

// listenPprof binds addr, which must be a loopback address or localhost.
func listenPprof(addr string) (*pprofListener, error) {
	if err := loopbackOnly(addr); err != nil {
		return nil, fmt.Errorf("--pprof-listen %q: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return &pprofListener{ln: ln, srv: srv}, nil
}

// loopbackOnly refuses an address whose host is not localhost or a
// loopback IP (an empty host would listen on every interface).
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errors.New("profiles have no authentication; give a loopback address such as 127.0.0.1:6060")
}

// Addr is the bound address.
func (p *pprofListener) Addr() string { return p.ln.Addr().String() }

// serve serves until close; run it in its own goroutine.
func (p *pprofListener) serve() { _ = p.srv.Serve(p.ln) }

// close stops serving at once (a CPU profile or trace in progress ends)
// and releases the address, served or not.
func (p *pprofListener) close() {
	_ = p.srv.Close()
	_ = p.ln.Close()
}

// openPprof binds --pprof-listen, when given; Run serves it.
func (m *Main) openPprof() error {
	if m.flags.pprofListen == "" {
		return nil
	}
	p, err := listenPprof(m.flags.pprofListen)
	if err != nil {
		return err
	}
	m.pprof = p
	m.onClose(p.close)
	return nil
}

// servePprof starts serving the profiles, when bound.
func (m *Main) servePprof() {
	if m.pprof == nil {
		return
	}
	m.log.Info("serving pprof", "addr", m.pprof.Addr())
	go m.pprof.serve()
}
