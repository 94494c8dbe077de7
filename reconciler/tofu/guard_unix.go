//go:build unix

package tofu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A server whose right to act ends unless it is renewed (a replica's
// lease) runs each detached apply under a guard (Options.Guard): a small
// process between the server and tofu that interrupts tofu once that
// right has ended. The server tells the guard, on a pipe, until when it
// may act, and again after every renewal. A server that cannot tell it
// in time, because it is paused (SIGSTOP, a long GC), or dead, or fenced,
// has its tofu interrupted at that time, so that tofu stops after the
// operations in flight and saves its state while the lease still holds,
// instead of creating machines that no state may take in any more.

// GuardCommand is the subcommand of the server's binary that runs the
// guard (see Guard); Options.Guard names it after the binary.
const GuardCommand = "tofu-guard"

// guardFD is the guard's file descriptor of the pipe that the server
// writes its deadlines on: the first of exec.Cmd.ExtraFiles.
const guardFD = 3

// guardPoll is how often the server looks for a new deadline to send.
const guardPoll = 100 * time.Millisecond

// guardPipe is the server's end of a guard: the pipe it tells the
// guard its deadlines on.
type guardPipe struct {
	r, w  *os.File
	until func() time.Time
}

// command returns the program and arguments that run tofu with args:
// tofu itself, or the guard that runs it (Options.Guard), with the pipe
// that cmd.ExtraFiles must pass to it.
func (s *session) command(args []string) (string, []string, *guardPipe, error) {
	o := s.r.opts
	if len(o.Guard) == 0 || o.ActUntil == nil {
		return o.Binary, args, nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return "", nil, nil, fmt.Errorf("tofu guard: %w", err)
	}
	argv := append(append([]string{}, o.Guard[1:]...), "--until", deadlineText(o.ActUntil()), "--", o.Binary)
	return o.Guard[0], append(argv, args...), &guardPipe{r: r, w: w, until: o.ActUntil}, nil
}

// started closes the guard's end of the pipe, which the guard holds now.
func (g *guardPipe) started() { g.r.Close() }

// feed tells the guard every new deadline until exited closes, or the
// guard is gone; then it closes the pipe.
func (g *guardPipe) feed(exited <-chan struct{}) {
	defer g.w.Close()
	last := ""
	t := time.NewTicker(guardPoll)
	defer t.Stop()
	for {
		if d := deadlineText(g.until()); d != last {
			if _, err := io.WriteString(g.w, d+"\n"); err != nil {
				return
			}
			last = d
		}
		select {
		case <-exited:
			return
		case <-t.C:
		}
	}
}

// deadlineText is how a deadline travels to the guard: Unix nanoseconds,
// 0 for the zero time (the server may not act at all).
func deadlineText(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

func parseDeadline(s string) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("deadline %q: want Unix nanoseconds", s)
	}
	if n == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, n), nil
}

// Guard is the guard process, `BINARY tofu-guard --until NS -- TOFU
// ARGS...`: it runs tofu with its own standard files and environment,
// reads later deadlines from file descriptor 3, and interrupts tofu
// (SIGINT) once the last deadline it read has passed, or when it gets
// SIGINT or SIGTERM itself. It interrupts tofu once: tofu takes a second
// interrupt for an order to exit at once, without saving its state, and
// the server's own interrupt and the deadline may come together (a
// replica fences itself at its deadline). The pipe's end, when the
// server died, sends no more: the last deadline holds. A guard that is
// killed takes its tofu with it (on Linux). It returns tofu's exit code.
func Guard(args []string, stderr io.Writer) int {
	deadline, argv, err := guardArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "rezuscloud %s: %v\n", GuardCommand, err)
		return 2
	}
	syscall.CloseOnExec(guardFD) // tofu gets only its standard files
	updates := readDeadlines(os.NewFile(guardFD, "deadlines"))
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	killOnDeath(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "rezuscloud %s: start tofu: %v\n", GuardCommand, err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	interrupted := false
	interrupt := func() {
		if !interrupted {
			interrupted = true
			_ = cmd.Process.Signal(os.Interrupt)
		}
	}
	for {
		select {
		case err := <-exited:
			return exitCode(err)
		case <-signals:
			interrupt()
		case d, ok := <-updates:
			if !ok {
				updates = nil // the server is gone: its last deadline holds
				continue
			}
			if !interrupted {
				deadline = d
				timer.Reset(time.Until(deadline))
			}
		case <-timer.C:
			if interrupted {
				continue
			}
			fmt.Fprintf(stderr, "\nError: the server's right to act on this tenant ended at %s without a renewal (its lease): tofu was interrupted, to save its state before another server may take over\n", deadline.UTC().Format(time.RFC3339Nano))
			interrupt()
		}
	}
}

// guardArgs parses `--until NS -- TOFU ARGS...`.
func guardArgs(args []string) (time.Time, []string, error) {
	if len(args) < 4 || args[0] != "--until" || args[2] != "--" {
		return time.Time{}, nil, errors.New("usage: " + GuardCommand + " --until UNIX-NANOSECONDS -- TOFU ARGS...")
	}
	d, err := parseDeadline(args[1])
	return d, args[3:], err
}

// readDeadlines sends each deadline read from f, and closes at its end.
// A line that does not parse ends it too: the last deadline then holds.
func readDeadlines(f *os.File) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		defer close(out)
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			d, err := parseDeadline(sc.Text())
			if err != nil {
				return
			}
			// Only the newest matters: drop one not yet taken.
			select {
			case <-out:
			default:
			}
			out <- d
		}
	}()
	return out
}

// exitCode is the guard's exit code for tofu's end.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return max(ee.ExitCode(), 1)
	}
	return 1
}
