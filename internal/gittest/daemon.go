package gittest

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"sync"
	"testing"
)

// Daemon serves the bare repositories under a temporary directory over the
// git:// protocol with the real `git daemon`, clone, fetch and push alike.
//
// It accepts connections on 127.0.0.1 itself and hands each one to
// `git daemon --inetd`, so the port is chosen by the kernel, never guessed,
// and stays the same across Stop and Start.
type Daemon struct {
	repos
	l *listener

	mu     sync.Mutex
	procs  map[*exec.Cmd]struct{}
	wg     sync.WaitGroup
	stderr bytes.Buffer
}

// NewDaemon starts a git daemon for the rest of the test.
func NewDaemon(t testing.TB) *Daemon {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git daemon needs the git CLI: %v", err)
	}
	d := &Daemon{
		repos: repos{t: t, root: t.TempDir()},
		procs: map[*exec.Cmd]struct{}{},
	}
	d.l = newListener(t, d.serve)
	t.Cleanup(d.Stop)
	return d
}

// URL returns the git:// URL of the repository name.
func (d *Daemon) URL(name string) string {
	return "git://" + d.l.addr + "/" + name
}

// Addr returns the host:port the daemon listens on.
func (d *Daemon) Addr() string { return d.l.addr }

// Connections returns how many connections the daemon has accepted: one per
// ls-remote, fetch or push.
func (d *Daemon) Connections() int { return int(d.l.conns.Load()) }

// Stop makes the daemon unreachable: it closes the listening socket and
// ends the transfers in progress. Connections are refused until Start.
func (d *Daemon) Stop() {
	if !d.l.stop() {
		return
	}
	d.mu.Lock()
	for cmd := range d.procs {
		cmd.Process.Kill()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// Start listens again on the same address after Stop.
func (d *Daemon) Start() {
	d.t.Helper()
	d.l.start()
}

// Log returns what the git daemon processes wrote to stderr.
func (d *Daemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stderr.String()
}

func (d *Daemon) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		if err := d.handle(conn); err != nil {
			d.mu.Lock()
			d.stderr.WriteString("gittest: " + err.Error() + "\n")
			d.mu.Unlock()
		}
	}
}

// handle runs one `git daemon --inetd` with the connection as its stdin and
// stdout.
func (d *Daemon) handle(conn net.Conn) error {
	defer conn.Close()
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return errors.New("not a TCP connection")
	}
	f, err := tcp.File()
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("git", "daemon", "--inetd",
		"--base-path="+d.root, "--export-all", "--enable=receive-pack",
		"--informative-errors", "--log-destination=stderr", d.root)
	cmd.Env = gitEnv()
	cmd.Stdin = f
	cmd.Stdout = f
	cmd.Stderr = daemonLog{d}
	if err := cmd.Start(); err != nil {
		return err
	}
	d.mu.Lock()
	d.procs[cmd] = struct{}{}
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		cmd.Wait()
		d.mu.Lock()
		delete(d.procs, cmd)
		d.mu.Unlock()
	}()
	return nil
}

// daemonLog appends a daemon process's stderr to the Daemon's log.
type daemonLog struct{ d *Daemon }

func (w daemonLog) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.stderr.Write(p)
}
