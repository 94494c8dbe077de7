package supervise

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultWait is how long the supervisor waits, after the server exited,
// for what the server left running.
const DefaultWait = 5 * time.Minute

// Run runs argv (the server) and returns its exit code once it and every
// process it left have exited, or wait after the server exited, whichever
// comes first. SIGTERM, SIGINT and SIGHUP go on to the server. Messages go
// to stderr.
func Run(argv []string, wait time.Duration, stderr io.Writer) int {
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "rezuscloud supervise: no command to run: want -- COMMAND ARGS...")
		return 2
	}
	// The processes the server leaves are ours to wait for, not init's.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "rezuscloud supervise: become the subreaper of the server's processes: %v\n", err)
		return 1
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(signals)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "rezuscloud supervise: %v\n", err)
		return 1
	}
	main, err := os.StartProcess(path, argv, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(stderr, "rezuscloud supervise: start %s: %v\n", argv[0], err)
		return 1
	}
	reaped := make(chan reap, 16)
	go reapAll(reaped)
	code, mainDone := 0, false
	var deadline <-chan time.Time
	for {
		select {
		case sig := <-signals:
			if !mainDone {
				_ = main.Signal(sig)
			}
		case r, ok := <-reaped:
			if !ok { // no process is left
				return code
			}
			if r.pid == main.Pid {
				code, mainDone = exitCode(r.status), true
				deadline = time.After(wait)
				fmt.Fprintf(stderr, "rezuscloud supervise: the server exited (%s); waiting up to %s for the processes it left\n", describe(r.status), wait)
			}
		case <-deadline:
			fmt.Fprintf(stderr, "rezuscloud supervise: processes the server left still run after %s; exiting without them\n", wait)
			return code
		}
	}
}

// reap is one process that ended.
type reap struct {
	pid    int
	status syscall.WaitStatus
}

// reapAll waits for every child, ours and those given to us, and closes
// out when none is left.
func reapAll(out chan<- reap) {
	defer close(out)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: none left
			return
		}
		out <- reap{pid: pid, status: ws}
	}
}

// exitCode is the supervisor's code for the server's end: its own, or
// 128 plus the signal that ended it, as a shell says.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("code %d", ws.ExitStatus())
}
