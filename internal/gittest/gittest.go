// Package gittest runs real git servers on 127.0.0.1 for tests: `git daemon`
// for the git:// protocol and `git http-backend` behind basic auth for smart
// HTTP. Workdir drives the git CLI to commit and push into them.
//
// It is for tests only: every helper takes a testing.TB, fails the test on
// error and cleans up after it. It must not be imported by production code.
package gittest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Git runs the git CLI in dir with an environment that ignores the user's
// and the system's git configuration, and returns its trimmed stdout. It
// fails the test when git fails.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := runGit(dir, args...)
	if err != nil {
		t.Fatalf("git %s (in %s): %v", strings.Join(args, " "), dir, err)
	}
	return out
}

func runGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", &gitError{err: err, stderr: strings.TrimSpace(stderr.String())}
	}
	return strings.TrimSpace(stdout.String()), nil
}

type gitError struct {
	err    error
	stderr string
}

func (e *gitError) Error() string { return e.err.Error() + ": " + e.stderr }
func (e *gitError) Unwrap() error { return e.err }

// gitEnv is the environment of every git process this package starts: no
// global or system configuration, no prompts, a fixed identity.
func gitEnv() []string {
	env := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Gittest Author",
		"GIT_AUTHOR_EMAIL=author@gittest.invalid",
		"GIT_COMMITTER_NAME=Gittest Committer",
		"GIT_COMMITTER_EMAIL=committer@gittest.invalid",
		"HOME=" + os.TempDir(),
		"LANG=C",
		"LC_ALL=C",
	}
	if p := os.Getenv("PATH"); p != "" {
		env = append(env, "PATH="+p)
	}
	return env
}

// repos is a directory of bare repositories that a server exports.
type repos struct {
	t    testing.TB
	root string
}

// CreateBare creates an empty bare repository name (e.g. "manifests.git")
// whose default branch is main, and returns its path on disk. Pushes to it
// are allowed over every protocol.
func (r *repos) CreateBare(name string) string {
	r.t.Helper()
	dir := r.Path(name)
	Git(r.t, r.root, "init", "--quiet", "--bare", "--initial-branch=main", dir)
	Git(r.t, dir, "config", "http.receivepack", "true")
	return dir
}

// CreateSHA256 creates a bare repository name in the SHA-256 object format
// with one commit on main, which holds the files (path to content), and
// returns the commit's sha (64 hex digits). A Workdir cannot push to it:
// its clone is in the SHA-1 format.
func (r *repos) CreateSHA256(name string, files map[string]string) string {
	r.t.Helper()
	dir := r.Path(name)
	Git(r.t, r.root, "init", "--quiet", "--bare", "--object-format=sha256", "--initial-branch=main", dir)
	Git(r.t, dir, "config", "http.receivepack", "true")
	work := r.t.TempDir()
	Git(r.t, work, "init", "--quiet", "--object-format=sha256", "--initial-branch=main")
	for p, content := range files {
		full := filepath.Join(work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatalf("write %s: %v", p, err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			r.t.Fatalf("write %s: %v", p, err)
		}
	}
	Git(r.t, work, "add", "--all")
	Git(r.t, work, "commit", "--quiet", "--allow-empty", "-m", "A commit in a SHA-256 repository")
	Git(r.t, work, "push", "--quiet", dir, "main")
	return Git(r.t, work, "rev-parse", "HEAD")
}

// Path returns where the bare repository name lives on disk.
func (r *repos) Path(name string) string {
	return filepath.Join(r.root, filepath.FromSlash(name))
}

// Root returns the directory that holds the served repositories.
func (r *repos) Root() string { return r.root }

// listener accepts connections on one fixed loopback address that survives
// Stop and Start, so a client configured with the address sees an outage
// and then a recovery.
type listener struct {
	t     testing.TB
	addr  string
	serve func(net.Listener)

	mu   sync.Mutex
	ln   net.Listener
	done chan struct{}

	conns atomic.Int64
}

func newListener(t testing.TB, serve func(net.Listener)) *listener {
	t.Helper()
	l := &listener{t: t, serve: serve}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	l.addr = ln.Addr().String()
	l.run(ln)
	return l
}

func (l *listener) run(ln net.Listener) {
	l.ln = countingListener{Listener: ln, n: &l.conns}
	l.done = make(chan struct{})
	go func(ln net.Listener, done chan struct{}) {
		defer close(done)
		l.serve(ln)
	}(l.ln, l.done)
}

// stop closes the listener and waits for the serving loop to end. It
// reports whether the listener was running.
func (l *listener) stop() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return false
	}
	l.ln.Close()
	<-l.done
	l.ln = nil
	return true
}

func (l *listener) start() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatalf("listen again on %s: %v", l.addr, err)
	}
	l.run(ln)
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (c countingListener) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err == nil {
		c.n.Add(1)
	}
	return conn, err
}
