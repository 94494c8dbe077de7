// Package servertest starts the real RezusCloud server for tests and
// benchmarks: the rezuscloud binary (built once per test process, as a
// release is) running `serve` on 127.0.0.1:0 with a data dir of its own, a
// source (a git repository or a directory), a tokens file, the tools its
// runs need (the tofu binary and the provider mirror that testenv finds)
// and, when asked, the simulated cloud (--sim-cloud). Start returns once
// the server serves. The Server owns the process: its log, a stop that
// must end in exit 0, a kill, a start again on the same address, and the
// HTTP requests and waits that every rig makes.
//
// Options.Flags gives the same settings as serve's flags, for the tests
// of cmd/rezuscloud that boot the server's Main in their own process.
//
// It is for tests only: no package of the server or the CLI imports it
// (internal/layering checks that).
package servertest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// TB is what the rig needs of a test or a benchmark: testing.TB has it,
// and a testscript command can have it through a small adapter.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Timeouts of the rig: generous, since the machines that run the tests
// share their cores and a first apply runs tofu init.
const (
	// StartTimeout bounds the wait for a started server to serve.
	StartTimeout = 2 * time.Minute
	// StopTimeout bounds the wait for a stopped server to exit.
	StopTimeout = 2 * time.Minute
	// WaitTimeout bounds every WaitFor.
	WaitTimeout = 2 * time.Minute
)

// Options say how to start the server. The zero value serves the state
// backend and the API alone, on a new data dir.
type Options struct {
	// Binary is the rezuscloud binary; default Binary.
	Binary string
	// Data is the data dir; default "data" in a new temporary directory.
	Data string
	// Repo is the git URL to reconcile, and Path the directory in it
	// that holds the manifests; Dir is a local directory to reconcile
	// instead. With either, the server gets the tofu binary (Tofu, else
	// testenv.Tofu) and the provider mirror (testenv.ProviderMirror).
	Repo, Path, Dir string
	Tofu            string
	// TokensFile is the tokens file (see Tokens); without it the server
	// takes every request as an admin's.
	TokensFile string
	// SimCloud runs the simulated cloud in the server (--sim-cloud), for
	// the tenants of providerClass sim.
	SimCloud bool
	// Args are further flags of serve; one given twice counts the last
	// time, so Args override the flags above.
	Args []string
	// Env holds further environment variables, NAME=value; PATH and HOME
	// (a new temporary directory) are always set, and Env may override
	// them.
	Env []string
	// Log, when set, gets every line the server logs, as it logs it.
	Log io.Writer
}

// Flags returns the flags of serve that o stands for, --listen aside.
func (o Options) Flags(tb TB) []string {
	tb.Helper()
	data := o.Data
	if data == "" {
		data = filepath.Join(tb.TempDir(), "data")
	}
	args := []string{"--data", data}
	if o.Repo != "" {
		args = append(args, "--repo", o.Repo)
		if o.Path != "" {
			args = append(args, "--path", o.Path)
		}
	}
	if o.Dir != "" {
		args = append(args, "--dir", o.Dir)
	}
	if o.Repo != "" || o.Dir != "" {
		tofu := o.Tofu
		if tofu == "" {
			tofu = testenv.Tofu(tb)
		}
		args = append(args, "--tofu", tofu, "--provider-mirror", testenv.ProviderMirror(tb))
	}
	if o.TokensFile != "" {
		args = append(args, "--tokens-file", o.TokensFile)
	}
	if o.SimCloud {
		args = append(args, "--sim-cloud")
	}
	return append(args, o.Args...)
}

// Server is a `rezuscloud serve` process, which can be stopped and started
// again on the same data dir and address.
type Server struct {
	tb TB
	// Args are the flags, --listen aside, that Start passes; a test may
	// change them between a Stop and the next Start.
	Args []string
	bin  string
	env  []string
	data string
	tee  io.Writer

	listen string // the address of the next Start
	url    string
	cmd    *exec.Cmd
	done   chan struct{}

	mu    sync.Mutex
	logs  bytes.Buffer
	pprof string
}

// New prepares a server as o says; Start runs it. When the test ends, a
// server still running is stopped, and a failed test logs what it logged.
func New(tb TB, o Options) *Server {
	tb.Helper()
	if o.Data == "" {
		o.Data = filepath.Join(tb.TempDir(), "data")
	}
	if o.Binary == "" {
		o.Binary = Binary(tb)
	}
	s := &Server{
		tb: tb, Args: o.Flags(tb), bin: o.Binary, data: o.Data, tee: o.Log,
		env:    append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + tb.TempDir()}, o.Env...),
		listen: "127.0.0.1:0",
	}
	tb.Cleanup(s.cleanup)
	return s
}

// Start prepares a server as o says and runs it (New, then Start).
func Start(tb TB, o Options) *Server {
	tb.Helper()
	s := New(tb, o)
	s.Start()
	return s
}

func (s *Server) cleanup() {
	if s.Running() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(StopTimeout):
			s.cmd.Process.Kill()
			<-s.done
		}
	}
	if f, ok := s.tb.(interface{ Failed() bool }); ok && f.Failed() {
		s.tb.Logf("rezuscloud serve log, without request lines:\n%s", s.LogWithoutRequests())
	}
}

// servingRE finds the address in the server's "serving" line, in the text
// and the JSON log format.
var servingRE = regexp.MustCompile(`msg=serving addr=(\S+)|"msg":"serving","addr":"([^"]+)"`)

// pprofRE finds the address of --pprof-listen in its line.
var pprofRE = regexp.MustCompile(`msg="serving pprof" addr=(\S+)|"msg":"serving pprof","addr":"([^"]+)"`)

// Start runs the server and waits until it serves. The first start listens
// on a port the kernel picks; later starts reuse it (see NewPort).
func (s *Server) Start() {
	s.tb.Helper()
	if s.Running() {
		s.tb.Fatalf("rezuscloud serve is already running")
	}
	s.done = make(chan struct{})
	s.cmd = exec.Command(s.bin, append([]string{"serve", "--listen", s.listen}, s.Args...)...)
	s.cmd.Env = s.env
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		s.tb.Fatalf("rezuscloud serve: %v", err)
	}
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("rezuscloud serve: %v", err)
	}
	addr := make(chan string, 1)
	go s.read(stderr, s.cmd, s.done, addr)
	select {
	case a := <-addr:
		s.listen, s.url = a, "http://"+a
	case <-s.done:
		s.tb.Fatalf("rezuscloud serve exited before serving: %v\n%s", s.cmd.ProcessState, s.Tail(50))
	case <-time.After(StartTimeout):
		s.tb.Fatalf("rezuscloud serve did not start serving within %v:\n%s", StartTimeout, s.Tail(50))
	}
}

// read keeps the log of one process, hands on the address it serves on,
// and closes done once the process has exited.
func (s *Server) read(stderr io.Reader, cmd *exec.Cmd, done chan struct{}, addr chan<- string) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.logs.WriteString(line + "\n")
		if m := pprofRE.FindStringSubmatch(line); m != nil {
			s.pprof = "http://" + m[1] + m[2]
		}
		s.mu.Unlock()
		if s.tee != nil {
			io.WriteString(s.tee, line+"\n")
		}
		if m := servingRE.FindStringSubmatch(line); m != nil {
			select {
			case addr <- m[1] + m[2]:
			default:
			}
		}
	}
	io.Copy(io.Discard, stderr)
	cmd.Wait()
	close(done)
}

// Running reports whether the server's process runs.
func (s *Server) Running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Done is closed when the process of the last Start has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends SIGTERM and fails the test unless the server exits 0 within
// StopTimeout.
func (s *Server) Stop() {
	s.tb.Helper()
	if !s.Running() {
		s.tb.Fatalf("rezuscloud serve is not running")
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.tb.Fatalf("rezuscloud serve: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(StopTimeout):
		s.cmd.Process.Kill()
		<-s.done
		s.tb.Fatalf("rezuscloud serve did not stop within %v of SIGTERM:\n%s", StopTimeout, s.Tail(50))
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		s.tb.Fatalf("rezuscloud serve exited %d after SIGTERM, want 0:\n%s", code, s.Tail(50))
	}
}

// Kill kills the server with SIGKILL, as a crash would end it, and waits
// until it has exited.
func (s *Server) Kill() {
	s.tb.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		s.tb.Fatalf("kill rezuscloud serve: %v", err)
	}
	<-s.done
}

// Signal sends sig to the server's process.
func (s *Server) Signal(sig os.Signal) {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("signal rezuscloud serve: %v", err)
	}
}

// NewPort makes the next Start listen on a port the kernel picks, instead
// of the address of the last one.
func (s *Server) NewPort() { s.listen = "127.0.0.1:0" }

// URL is the base URL of the server, after Start.
func (s *Server) URL() string { return s.url }

// Addr is the address the server listens on, after Start.
func (s *Server) Addr() string { return s.listen }

// Data is the server's data dir.
func (s *Server) Data() string { return s.data }

// Pid is the process ID of the server's last Start.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// PprofURL is the base URL of --pprof-listen, once the server has logged
// it; "" before and without it.
func (s *Server) PprofURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pprof
}

// Log is everything the server has logged, over all its starts.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// LogWithoutRequests is the log without its access lines, which the
// tests' polling makes many of.
func (s *Server) LogWithoutRequests() string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s.Log(), "\n") {
		if !isRequestLine(line) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Tail is the last n lines of the log, access lines left out.
func (s *Server) Tail(n int) string {
	lines := strings.Split(strings.TrimSuffix(s.LogWithoutRequests(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// isRequestLine reports whether line is an access line, in the text or
// the JSON log format.
func isRequestLine(line string) bool {
	if strings.Contains(line, " msg=request ") {
		return true
	}
	var rec struct{ Msg string }
	return strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "request"
}

// Memory returns a figure of the server process's memory from
// /proc/PID/status, such as VmRSS, VmHWM (its peak), RssAnon or RssFile,
// in bytes.
func (s *Server) Memory(field string) int64 {
	s.tb.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		s.tb.Fatalf("memory of rezuscloud serve: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	s.tb.Fatalf("no %s in /proc/%d/status:\n%s", field, s.Pid(), status)
	return 0
}
