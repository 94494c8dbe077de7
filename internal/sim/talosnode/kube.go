package talosnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
)

// kubeDir is the folder of the sim dir that holds the Kubernetes control
// planes the host runs, one folder per cluster.
const kubeDir = "kubernetes"

// kubePlanes are the Kubernetes control planes the host runs, one per
// cluster whose bootstrapped node's record asks for one
// (sim.Record.KubernetesAPI). A plane starts when that node is
// bootstrapped, or when the host opens and finds it bootstrapped; it stops
// when the node is removed, when the host closes, and when the cluster
// loses its etcd (realetcd.go), to start again at the next bootstrap.
type kubePlanes struct {
	root      string // the sim dir's kubeDir
	log       *slog.Logger
	mu        sync.Mutex
	byCluster map[string]*kubePlane
	byConfig  map[string]components // by config hash
	// halting holds, by cluster, a channel closed when the last stop of
	// its control plane has finished: a start waits for it.
	halting map[string]chan struct{}
	wg      sync.WaitGroup // starts and stops under way
}

type kubePlane struct {
	cp      *kubeapi.ControlPlane // nil while it starts
	kubelet func()                // stops its nodes' kubelet
	stopped bool                  // a stop came while it started
	started chan struct{}         // closed when its start has ended, well or not
	// restarting is set while its API server restarts for a new config.
	restarting bool
	dir        string
}

// dirOf is the directory of cluster's control plane.
func (k *kubePlanes) dirOf(cluster string) string { return filepath.Join(k.root, clusterKey(cluster)) }

// wantsKube reports whether n's cluster asks for a Kubernetes API, and
// names its tenant for the log: its record says so, or it is a bare-metal
// machine and the host gives their clusters one
// (Options.MetalKubernetesAPI).
func (h *Host) wantsKube(n *node) (tenant string, ok bool) {
	switch n.st.Origin {
	case originRecord:
		rec, err := h.store.Get(n.st.ID)
		return rec.Tenant, err == nil && rec.KubernetesAPI
	case originMetal:
		return n.st.Address, h.opts.MetalKubernetesAPI
	}
	return "", false
}

// kubeFor starts the Kubernetes control plane of n's cluster when n is
// its bootstrapped node, its record asks for one, and none runs yet. The
// start runs on a goroutine of its own; what goes wrong is logged, and the
// node's Talos API is not affected. Called with h.mu held.
func (h *Host) kubeFor(n *node) {
	if !n.st.Etcd.Bootstrapped || n.cluster() == "" {
		return
	}
	tenant, ok := h.wantsKube(n)
	if !ok {
		return
	}
	o, err := h.kubeOptions(n)
	if err != nil {
		h.log.Warn("no Kubernetes API for the tenant", "tenant", tenant, "machine", n.st.ID, "err", err)
		return
	}
	cluster := n.cluster()
	k := &h.kube
	k.mu.Lock()
	if k.byCluster == nil {
		k.byCluster = map[string]*kubePlane{}
	}
	if k.byCluster[cluster] != nil {
		k.mu.Unlock()
		return
	}
	p := &kubePlane{dir: o.Dir, started: make(chan struct{})}
	k.byCluster[cluster] = p
	halting := k.halting[cluster]
	k.wg.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.wg.Done()
		defer close(p.started)
		if halting != nil {
			<-halting // the ports and the directory are free once the former plane stopped
		}
		cp, err := kubeapi.Start(h.ctx, o)
		if err != nil {
			h.log.Warn("the tenant's Kubernetes API did not start", "tenant", tenant, "address", o.Address, "err", err)
			k.mu.Lock()
			if k.byCluster[cluster] == p {
				delete(k.byCluster, cluster)
			}
			k.mu.Unlock()
			return
		}
		kubeletDone, err := h.startKubelet(cluster, cp, o.CA)
		k.mu.Lock()
		stopped := p.stopped
		if !stopped {
			p.cp, p.kubelet = cp, kubeletDone
		}
		k.mu.Unlock()
		switch {
		case stopped:
			if kubeletDone != nil {
				kubeletDone()
			}
			cp.Stop()
		case err != nil:
			h.log.Warn("the tenant's nodes do not report to its Kubernetes API", "tenant", tenant, "err", err)
		default:
			h.log.Info("the tenant's Kubernetes API serves", "tenant", tenant, "url", cp.URL())
		}
	}()
}

// startKubelet runs the kubelet of the cluster's nodes (internal/sim/kubelet)
// toward cp, as a member of system:masters, and returns the function that
// stops it and waits for it to end.
func (h *Host) startKubelet(cluster string, cp *kubeapi.ControlPlane, caPEM *x509.PEMEncodedCertificateAndKey) (func(), error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(caPEM)
	if err != nil {
		return nil, err
	}
	pair, err := kubeapi.ClientCertificate(ca, "system:sim-kubelet", "system:masters")
	if err != nil {
		return nil, err
	}
	// A kubelet's own client may send 50 requests a second (bursts of 100);
	// client-go's default of 5 would make the cluster's Nodes report late.
	cfg := &rest.Config{Host: cp.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: caPEM.Crt, CertData: pair.CrtPEM, KeyData: pair.KeyPEM},
		QPS: 50, Burst: 100}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := kubelet.Run(ctx, kubelet.Options{Config: cfg, Nodes: func() []kubelet.Node { return h.kubeNodes(cluster) }, Logger: h.log}); err != nil {
			h.log.Warn("simulated kubelets", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// kubeNodes are the cluster's nodes as their kubelets report them: Ready
// while the node runs its config and its kubelet service is healthy; a
// node that is being reset has no kubelet any more.
func (h *Host) kubeNodes(cluster string) []kubelet.Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var out []kubelet.Node
	for n := range h.clusters[cluster] {
		if n.gone.Load() {
			continue
		}
		h.advance(n, now) // a reset that ends now takes the config away
		if n.st.Running == nil || n.st.Plan.resetting(now) {
			continue // a reset stops the kubelet first, as Talos's does, until the machine boots again
		}
		kn := kubelet.Node{Name: n.hostname(), Address: n.st.Address, ControlPlane: n.controlPlane(),
			Ready: n.running(now), OSImage: "Talos (" + n.st.Version + ")"}
		c := h.kube.components(h, n)
		kn.KubeletVersion = c.kubelet
		if n.controlPlane() {
			kn.StaticPods = c.static
		}
		if n.st.Etcd.Bootstrapped {
			h.kube.follow(h, cluster, c.apiServerArgs)
		}
		switch {
		case !kn.Ready:
			kn.Reason, kn.Message = "KubeletNotReady", "the node is "+strings.ToLower(n.viewAt(now).Stage.String())
		case n.fault.Unhealthy == "kubelet":
			kn.Ready, kn.Reason, kn.Message = false, "KubeletNotReady", unhealthyMessage("kubelet")
		}
		out = append(out, kn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// components are what n's running config says of the Kubernetes
// components, read once per config. Called with h.mu held.
func (k *kubePlanes) components(h *Host, n *node) components {
	hash := n.st.Running.Hash
	k.mu.Lock()
	c, ok := k.byConfig[hash]
	k.mu.Unlock()
	if ok {
		return c
	}
	if b, err := h.readConfig(n.dir, hash); err == nil {
		c = componentsOf(b)
	}
	k.mu.Lock()
	if k.byConfig == nil {
		k.byConfig = map[string]components{}
	}
	k.byConfig[hash] = c
	k.mu.Unlock()
	return c
}

// kubeOptions reads what the control plane needs from n's running config:
// the cluster's Kubernetes CA and service-account key, and the control
// plane endpoint, which must be a loopback address.
func (h *Host) kubeOptions(n *node) (kubeapi.Options, error) {
	if h.opts.KubeBin == "" {
		return kubeapi.Options{}, errors.New("the node host has no Kubernetes binaries (--sim-kube-bin)")
	}
	b, err := h.readConfig(n.dir, n.st.Running.Hash)
	if err != nil {
		return kubeapi.Options{}, err
	}
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		return kubeapi.Options{}, err
	}
	var ep *url.URL
	if c := cfg.K8sClusterConfig(); c != nil {
		ep = c.ClusterEndpoint()
	}
	if ep == nil {
		return kubeapi.Options{}, errors.New("the config has no control plane endpoint")
	}
	addr, err := netip.ParseAddr(ep.Hostname())
	if err != nil || !addr.Is4() || !addr.IsLoopback() {
		return kubeapi.Options{}, fmt.Errorf("control plane endpoint %s: the simulated cloud serves Kubernetes only at a loopback IPv4 address, such as https://127.250.0.1:6443", ep)
	}
	port := kubeapi.DefaultPort
	if p := ep.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return kubeapi.Options{}, fmt.Errorf("control plane endpoint %s: %w", ep, err)
		}
	}
	var ca *x509.PEMEncodedCertificateAndKey
	if c := cfg.K8sAPIServerCAConfig(); c != nil {
		ca = c.IssuingCA()
	}
	var sa *x509.PEMEncodedKey
	if c := cfg.K8sServiceAccountConfig(); c != nil {
		sa = c.IssuingKey()
	}
	if ca == nil || len(ca.Key) == 0 || sa == nil {
		return kubeapi.Options{}, errors.New("the config holds no Kubernetes CA key or service-account key")
	}
	return kubeapi.Options{
		Bin: h.opts.KubeBin, Dir: h.kube.dirOf(n.cluster()),
		Address: addr, Port: port, CA: ca, ServiceAccountKey: sa.Key,
		APIServerArgs: componentsOf(b).apiServerArgs,
	}, nil
}

// resumeKube starts the control planes of the bootstrapped nodes that
// were restored from disk.
func (h *Host) resumeKube() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.byID {
		h.kubeFor(n)
	}
}

// stop stops the control plane of cluster, and with remove deletes its
// folder too.
func (k *kubePlanes) stop(cluster string, remove bool) {
	var after func(string) error
	if remove {
		after = os.RemoveAll
	}
	<-k.halt(cluster, after)
}

// halt stops the control plane of cluster on a goroutine of its own,
// once any former stop of it has finished, then calls after (if not nil)
// with its directory. The channel it returns is closed when all that is
// done. A start of the cluster's control plane waits for it.
func (k *kubePlanes) halt(cluster string, after func(dir string) error) <-chan struct{} {
	k.mu.Lock()
	p := k.byCluster[cluster]
	delete(k.byCluster, cluster)
	if p != nil {
		p.stopped = true
	}
	prev, done := k.halting[cluster], make(chan struct{})
	if k.halting == nil {
		k.halting = map[string]chan struct{}{}
	}
	k.halting[cluster] = done
	k.wg.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.wg.Done()
		defer close(done)
		if prev != nil {
			<-prev
		}
		if p != nil {
			<-p.started // a start under way stops what it started itself
			if p.kubelet != nil {
				p.kubelet()
			}
			if p.cp != nil {
				p.cp.Stop()
			}
		}
		if after != nil {
			if err := after(k.dirOf(cluster)); err != nil {
				k.log.Warn("the tenant's Kubernetes control plane", "dir", k.dirOf(cluster), "err", err)
			}
		}
		k.mu.Lock()
		if k.halting[cluster] == done {
			delete(k.halting, cluster)
		}
		k.mu.Unlock()
	}()
	return done
}

// running returns the cluster's control plane once it serves.
func (k *kubePlanes) running(cluster string) *kubeapi.ControlPlane {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.byCluster[cluster]; p != nil {
		return p.cp
	}
	return nil
}

// close stops every control plane, and waits for the starts under way,
// which stop what they started.
func (k *kubePlanes) close() {
	k.mu.Lock()
	var clusters []string
	for c := range k.byCluster {
		clusters = append(clusters, c)
	}
	k.mu.Unlock()
	for _, c := range clusters {
		k.stop(c, false)
	}
	k.wg.Wait()
}

// KubernetesURL returns the URL of the Kubernetes API the host runs for
// the cluster of the machine id, once it serves.
func (h *Host) KubernetesURL(id string) (string, bool) {
	h.mu.Lock()
	n := h.byID[id]
	h.mu.Unlock()
	if n == nil {
		return "", false
	}
	h.kube.mu.Lock()
	defer h.kube.mu.Unlock()
	if p := h.kube.byCluster[n.cluster()]; p != nil && p.cp != nil {
		return p.cp.URL(), true
	}
	return "", false
}
