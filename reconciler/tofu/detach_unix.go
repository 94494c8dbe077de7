//go:build unix

package tofu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// runOutput is the file in a work directory that a running `tofu apply`
// writes its output to. The server holds an exclusive flock on it, and so
// does tofu, which shares the open file as its stdout and stderr: the lock
// lasts as long as the apply does, even when the server dies first.
const runOutput = ".rezuscloud-tofu.out"

// applyDetached runs `tofu apply PLAN` so that it can outlive the server.
// terraform-exec starts tofu with a parent-death signal (SIGKILL) and with
// pipes for its output; a server killed mid-apply then takes tofu with it,
// before tofu can write what it created anywhere, and no state knows those
// machines. Here tofu gets a process group of its own, no parent-death
// signal, and a file for its output, so it finishes the apply, retries the
// final write of the state and, when the server is gone, saves the state
// in errored.tfstate, which the next run pushes (pushErrored).
//
// A cancelled ctx interrupts tofu with SIGINT and gives it the runner's
// InterruptDelay before it is killed. The output goes to the session's
// tail when tofu exits, and the file is removed.
func (s *session) applyDetached(ctx context.Context, plan string) error {
	return s.detached(ctx, []string{"apply", "-no-color", "-auto-approve", "-input=false", plan}, nil)
}

// detached runs tofu with args as applyDetached describes. talk, when
// set, runs while tofu does, with tofu's stdin and its output file; tofu
// ends the run when it exits, and so does an error from talk.
func (s *session) detached(ctx context.Context, args []string, talk func(stdin io.WriteCloser, out *os.File, exited <-chan struct{}) error) error {
	path := filepath.Join(s.dir, runOutput)
	_ = os.Remove(path)
	out, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("apply output: %w", err)
	}
	defer func() {
		out.Close()
		_ = os.Remove(path)
	}()
	if err := flock(out, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("apply output: %w", err)
	}
	name, argv, guard, err := s.command(args)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	if guard != nil {
		cmd.ExtraFiles = []*os.File{guard.r}
		defer guard.w.Close() // when Start fails
	}
	cmd.Dir = s.dir
	cmd.Env = s.environ()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.r.opts.InterruptOnDeath {
		interruptOnDeath(cmd.SysProcAttr)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = s.r.opts.InterruptDelay
	var stdin io.WriteCloser
	if talk != nil {
		if stdin, err = cmd.StdinPipe(); err != nil {
			return fmt.Errorf("tofu stdin: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		if guard != nil {
			guard.started()
		}
		return err
	}
	exited := make(chan struct{})
	var runErr error
	go func() {
		runErr = cmd.Wait()
		close(exited)
	}()
	if guard != nil {
		guard.started()
		go guard.feed(exited)
	}
	var talkErr error
	if talk != nil {
		talkErr = talk(stdin, out, exited)
		stdin.Close() // an answer never given is an EOF, which tofu takes as no
	}
	<-exited
	tail, err := readTail(out, int64(s.out.max))
	if err != nil {
		return fmt.Errorf("apply output: %w", err)
	}
	_, _ = s.out.Write(tail)
	switch {
	case talkErr != nil:
		return talkErr
	case runErr != nil:
		return fmt.Errorf("%w\n%s", runErr, errorLines(tail))
	}
	return nil
}

// promptPoll is how often the output of a tofu that plans is read.
const promptPoll = 5 * time.Millisecond

// awaitApproval copies tofu's output from out to w as tofu writes it,
// until tofu waits for the approval of its plan (true) or exits (false).
func awaitApproval(ctx context.Context, out *os.File, w io.Writer, exited <-chan struct{}) (bool, error) {
	buf := make([]byte, 64<<10)
	var off int64
	var tail []byte // the last bytes of the output, where a question is
	for {
		n, err := out.ReadAt(buf, off)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			off += int64(n)
			tail = append(tail, buf[:n]...)
			tail = tail[max(0, len(tail)-1024):]
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("apply output: %w", err)
		}
		switch asked(tail) {
		case askedApproval:
			return true, nil
		case askedOther:
			return false, errors.New("tofu asked for input it has no answer to: " + question(tail))
		}
		select {
		case <-exited:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(promptPoll):
		}
	}
}

// environ returns the session's environment for exec, in a fixed order,
// with what terraform-exec sets for every command it runs.
func (s *session) environ() []string {
	env := map[string]string{"TF_IN_AUTOMATION": "1"}
	for k, v := range s.env {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// readTail returns up to n bytes from the end of f.
func readTail(f *os.File, n int64) ([]byte, error) {
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	start := max(0, end-n)
	b := make([]byte, end-start)
	_, err = f.ReadAt(b, start)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return b, err
}

// waitIdle waits until no tofu apply that an earlier server process left
// running still writes to dir (see runOutput), then removes its output.
// It returns at once when there is none.
func waitIdle(ctx context.Context, dir string) error {
	path := filepath.Join(dir, runOutput)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		err := flock(f, syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the tofu of an earlier run to finish in %s: %w", dir, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return os.Remove(path)
}

// ApplyRunning reports whether a tofu apply, of this process or of an
// earlier one, still runs in dir.
func ApplyRunning(dir string) bool {
	f, err := os.Open(filepath.Join(dir, runOutput))
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(flock(f, syscall.LOCK_SH|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

// Interrupted reports whether the last apply in dir did not end as it
// should: a tofu apply of it may still run, or it left errored.tfstate.
func Interrupted(dir string) bool {
	for _, name := range []string{runOutput, ErroredState} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
