package kubeapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one child process of the control plane.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it has exited
	err  error         // its exit, once done is closed
}

func startProcess(name, bin string, args []string, log string) (*process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := command(bin, args)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady asks ready every 100 ms until it answers, the process exits,
// or timeout passes.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		try, cancelTry := context.WithTimeout(ctx, 5*time.Second)
		last = ready(try)
		cancelTry()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it answered: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", timeout, last)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM to the process's group and SIGKILL after grace, and
// waits for the process to exit.
func (p *process) stop(grace time.Duration) {
	signal := func(sig syscall.Signal) {
		if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !isProcessGone(err) {
			_ = p.cmd.Process.Signal(sig)
		}
	}
	signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	signal(syscall.SIGKILL)
	<-p.done
}

// get asks url and wants a 200 whose body holds want.
func get(ctx context.Context, c *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}
