// Package kubeapi runs a real Kubernetes control plane for a simulated
// tenant: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, as child
// processes on one loopback address, with the certificates and keys a real
// cluster's control plane would have from the tenant's Talos config (the
// cluster CA signs the API's serving certificate and verifies its clients,
// the service-account key signs tokens). So an admin kubeconfig that the
// server derives from the tenant's secrets bundle works against it as it
// would against a real cluster.
//
// It owns those processes, their directory (etcd's data, the certificates
// it issues, the kubeconfig of the controller-manager, a log per process),
// snapshots of that etcd and their restore (etcdutl), and nothing else. The binaries come from scripts/kube.sh, built from the
// Go module proxy. It dials nothing but the address it is given, which
// must be a loopback address, and it imports nothing of the project.
package kubeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	sx509 "github.com/siderolabs/crypto/x509"
)

// The ports the control plane serves on its address.
const (
	DefaultPort           = 6443
	EtcdClientPort        = 2379
	EtcdPeerPort          = 2380
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
)

// Options say what to run and where.
type Options struct {
	// Bin is the directory that holds etcd, kube-apiserver,
	// kube-controller-manager and kube-scheduler.
	Bin string
	// Dir is the control plane's own directory. What a former start left
	// there (etcd's data above all) is kept: a restart over the same Dir
	// serves the same objects.
	Dir string
	// Address is the loopback address it serves on; Port the API's port
	// there, DefaultPort when 0.
	Address netip.Addr
	Port    int
	// CA is the cluster's Kubernetes CA (cluster.ca of the Talos config).
	CA *sx509.PEMEncodedCertificateAndKey
	// ServiceAccountKey is the PEM private key that signs service-account
	// tokens (cluster.serviceAccount.key of the Talos config).
	ServiceAccountKey []byte
	// ServiceCIDR is the range of Services' cluster IPs; a loopback range
	// by default, so that no address the cluster hands out leaves
	// 127.0.0.0/8.
	ServiceCIDR netip.Prefix
	// Timeout bounds the wait for each process to answer; default 1 min.
	Timeout time.Duration
	// APIServerArgs are kube-apiserver's arguments beyond its own, as
	// cluster.apiServer.extraArgs gives them ("--runtime-config=...").
	APIServerArgs []string
}

// EmulationMinors are the Kubernetes minor versions 1.N, N from the
// first up to (not including) the second, that kube-apiserver of the
// release scripts/kube.sh builds (v1.37) can emulate with
// --emulated-version.
var EmulationMinors = [2]int{34, 37}

// DefaultServiceCIDR is the Services' range when Options.ServiceCIDR is
// unset.
var DefaultServiceCIDR = netip.MustParsePrefix("127.96.0.0/16")

// ControlPlane is a started control plane.
type ControlPlane struct {
	opts  Options
	files files
	mu    sync.Mutex // guards procs[1] across RestartAPIServer
	procs []*process // in start order: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
}

// Pids returns the process ID of each running process by name.
func (c *ControlPlane) Pids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := map[string]int{}
	for _, p := range c.procs {
		pids[p.name] = p.cmd.Process.Pid
	}
	return pids
}

// Start starts etcd, then kube-apiserver, then kube-controller-manager and
// kube-scheduler, each once the one before it answers, and returns when the
// API's /readyz says ok and the others' /healthz do. On an error it stops what
// it started.
func Start(ctx context.Context, o Options) (*ControlPlane, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	f, err := writeFiles(o)
	if err != nil {
		return nil, err
	}
	c := &ControlPlane{opts: o, files: f}
	for _, s := range []struct {
		name  string
		args  []string
		ready func(context.Context) error
	}{
		{"etcd", etcdArgs(o), c.etcdReady},
		{"kube-apiserver", apiserverArgs(o, f), c.apiReady},
		{"kube-controller-manager", controllerManagerArgs(o, f), c.healthz(ControllerManagerPort)},
		{"kube-scheduler", schedulerArgs(o, f), c.healthz(SchedulerPort)},
	} {
		p, err := startProcess(s.name, filepath.Join(o.Bin, s.name), s.args, filepath.Join(o.Dir, s.name+".log"))
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		if err := p.waitReady(ctx, o.Timeout, s.ready); err != nil {
			c.Stop()
			return nil, fmt.Errorf("%s on %s: %w (its log: %s)", s.name, o.Address, err, p.log)
		}
	}
	return c, nil
}

func (o *Options) defaults() error {
	switch {
	case o.Bin == "" || o.Dir == "":
		return errors.New("kubeapi: Bin and Dir must be set")
	case !o.Address.Is4() || !o.Address.IsLoopback():
		return fmt.Errorf("kubeapi: address %s: want an IPv4 loopback address", o.Address)
	case o.CA == nil || len(o.ServiceAccountKey) == 0:
		return errors.New("kubeapi: the cluster CA and the service-account key must be set")
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if !o.ServiceCIDR.IsValid() {
		o.ServiceCIDR = DefaultServiceCIDR
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return nil
}

// URL is the API's URL, as a kubeconfig names it.
func (c *ControlPlane) URL() string {
	return "https://" + netip.AddrPortFrom(c.opts.Address, uint16(c.opts.Port)).String()
}

// APIServerArgs are the extra arguments kube-apiserver runs with now.
func (c *ControlPlane) APIServerArgs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.opts.APIServerArgs)
}

// RestartAPIServer stops kube-apiserver and starts it again with the
// extra arguments args, as a control plane's new config restarts its
// static pod, and returns once it is ready. What the API server counted
// in memory (its metrics) starts again from nothing.
func (c *ControlPlane) RestartAPIServer(ctx context.Context, args []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.procs) < 2 {
		return errors.New("kubeapi: the control plane is stopped")
	}
	c.procs[1].stop(10 * time.Second)
	c.opts.APIServerArgs = slices.Clone(args)
	p, err := startProcess("kube-apiserver", filepath.Join(c.opts.Bin, "kube-apiserver"), apiserverArgs(c.opts, c.files), filepath.Join(c.opts.Dir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	c.procs[1] = p
	if err := p.waitReady(ctx, c.opts.Timeout, c.apiReady); err != nil {
		return fmt.Errorf("kube-apiserver on %s: %w (its log: %s)", c.opts.Address, err, p.log)
	}
	return nil
}

// Stop stops the processes in the reverse of their start order, each with
// SIGTERM and, after 10 s, SIGKILL. It returns once all have exited. The
// directory stays.
func (c *ControlPlane) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	c.procs = nil
}

func (c *ControlPlane) hostPort(port int) string {
	return net.JoinHostPort(c.opts.Address.String(), strconv.Itoa(port))
}

func (c *ControlPlane) etcdReady(ctx context.Context) error {
	return get(ctx, http.DefaultClient, "http://"+c.hostPort(EtcdClientPort)+"/health", `"health":"true"`)
}

// apiReady asks /readyz, which Kubernetes lets anyone read, trusting only
// the cluster CA.
func (c *ControlPlane) apiReady(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.opts.CA.Crt)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	return get(ctx, client, c.URL()+"/readyz", "ok")
}

// healthz asks /healthz on the secure port of the controller-manager or
// the scheduler, whose certificate each makes for itself.
func (c *ControlPlane) healthz(port int) func(context.Context) error {
	return func(ctx context.Context) error {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed health endpoint on loopback
		defer client.CloseIdleConnections()
		return get(ctx, client, "https://"+c.hostPort(port)+"/healthz", "ok")
	}
}

// isProcessGone tells an exited child's error.
func isProcessGone(err error) bool {
	return errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH)
}

// command is the exec.Cmd of one process, in its own process group.
func command(bin string, args []string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	return cmd
}
