// Package kubelet is the kubelet of the simulated nodes of one cluster
// toward that cluster's real Kubernetes API (internal/sim/kubeapi). Each
// node registers its Node with its Kubernetes and Talos versions, keeps its
// heartbeat Lease, is Ready only while its Talos stage is running and its
// kubelet service healthy, runs the pods bound to it (phase Running,
// Ready), shows the control plane components it runs as static pods by
// their mirror pods, and removes the pods that are deleted or evicted from it once
// their grace period has passed. No container runs: a pod's containers are
// reported running as soon as the pod is bound.
//
// It owns what a kubelet writes (Nodes, their Leases, the status of the
// pods on them) and nothing else; it never deletes a Node, which is for
// the cluster's operator. It talks to the API through client-go with the
// credentials it is given, and imports nothing of the project.
package kubelet

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Node is what the kubelet of one simulated node reports.
type Node struct {
	// Name is the Node's name: the machine's host name.
	Name string
	// Address is the machine's address, the Node's InternalIP.
	Address string
	// ControlPlane labels the Node node-role.kubernetes.io/control-plane.
	ControlPlane bool
	// Ready is whether the node runs and its kubelet is healthy; Reason
	// and Message say why not.
	Ready           bool
	Reason, Message string
	// KubeletVersion is the kubelet's version, such as v1.34.1; OSImage
	// the OS the Node reports, such as "Talos (v1.12.6)".
	KubeletVersion, OSImage string
	// StaticPods are the control plane components the node runs as
	// static pods, each shown by its mirror pod in kube-system.
	StaticPods []StaticPod
}

// StaticPod is a control plane component that a node runs from its own
// config rather than from the API: Component is its name
// (kube-apiserver), Image the image that config names.
type StaticPod struct {
	Component, Image string
}

// equal reports whether a and b report the same.
func (a Node) equal(b Node) bool {
	return a.Name == b.Name && a.Address == b.Address && a.ControlPlane == b.ControlPlane && a.Ready == b.Ready &&
		a.Reason == b.Reason && a.Message == b.Message && a.KubeletVersion == b.KubeletVersion &&
		a.OSImage == b.OSImage && slices.Equal(a.StaticPods, b.StaticPods)
}

// Options say which API and which nodes.
type Options struct {
	// Config reaches the cluster's API.
	Config *rest.Config
	// Nodes returns the cluster's nodes as they are now; it is asked at
	// every Interval.
	Nodes func() []Node
	// Interval between two rounds; default 1 s. The Lease is renewed
	// every LeaseRenew (default 10 s), within the 40 s after which the
	// controller-manager takes a silent node for lost.
	Interval, LeaseRenew time.Duration
	// MaxGrace caps the grace period a deleted pod is given before it is
	// removed; default 30 s.
	MaxGrace time.Duration
	Logger   *slog.Logger
}

// Run reports the nodes until ctx is done. Errors of a round are logged
// and the round is tried again at the next interval.
func Run(ctx context.Context, o Options) error {
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.LeaseRenew == 0 {
		o.LeaseRenew = 10 * time.Second
	}
	if o.MaxGrace == 0 {
		o.MaxGrace = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cs, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return err
	}
	k := &kubelet{o: o, cs: cs, sent: map[string]Node{}, renewed: map[string]time.Time{}}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		if err := k.round(ctx); err != nil && ctx.Err() == nil {
			o.Logger.Debug("kubelet round", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// kubelet is the state of Run.
type kubelet struct {
	o       Options
	cs      kubernetes.Interface
	sent    map[string]Node      // the status last written, by node
	renewed map[string]time.Time // the last renewal of each node's Lease
}

// round registers and reports every node, renews due Leases and brings the
// pods on the nodes up to date.
func (k *kubelet) round(ctx context.Context) error {
	nodes := k.o.Nodes()
	var errs []error
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = n.Ready
		if err := k.report(ctx, n); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := k.renew(ctx, n.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := k.staticPods(ctx, nodes); err != nil {
		errs = append(errs, err)
	}
	if err := k.pods(ctx, ready); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(errs)
}
