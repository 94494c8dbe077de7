package talos

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/reconciler/kube"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// DefaultKubernetesInterval is how often the observer looks at each
// tenant's Kubernetes API.
const DefaultKubernetesInterval = 10 * time.Second

// kubeWatch is what the observer knows of the tenants' Kubernetes APIs.
type kubeWatch struct {
	clients *kube.Clients
	mu      sync.Mutex
	last    map[string]time.Time // the last look at each tenant's API
	ready   map[string]bool      // its /readyz, for the tenants whose API answered once
	missed  map[string]int       // the looks in a row that found no answer, by tenant
}

func newKubeWatch() *kubeWatch {
	return &kubeWatch{clients: kube.NewClients(kube.Options{}), last: map[string]time.Time{}, ready: map[string]bool{}, missed: map[string]int{}}
}

// A tenant's API that does not answer is looked at less often: after
// kubeMissesAtInterval looks in a row at the interval found no answer
// (an API that starts answers within them), the wait doubles at each
// miss, up to kubeRetryMax. Each look at an API that does not answer
// builds the tenant's client anew (its credential's key pair, its
// transport): at 1,000 tenants whose APIs did not answer, looks every
// 10 s took 7 % of a core.
const (
	kubeMissesAtInterval = 6
	kubeRetryMax         = 2 * time.Minute
)

// kubeWait is how long after a look at an API that missed the last
// misses looks in a row the next look is.
func kubeWait(every time.Duration, misses int) time.Duration {
	wait := every
	for i := kubeMissesAtInterval; i < misses && wait < kubeRetryMax; i++ {
		wait *= 2
	}
	return min(wait, kubeRetryMax)
}

// observeKubernetes looks at the Kubernetes API of every tenant whose
// control plane runs kube-apiserver (talosAPI) and whose last look is at
// least every old, at most 8 at a time, and records the Nodes it lists on
// the machines (status.Recorder.KubernetesObserved). It returns whether
// each tenant's API is ready: /readyz decides once the API has answered
// the plane, and Talos's view of kube-apiserver until it has (a simulated
// tenant without a Kubernetes API of its own never answers).
func (pl *Plane) observeKubernetes(ctx context.Context, obs []Observed, talosAPI map[string]bool, bundle func(string) []byte, every time.Duration) map[string]bool {
	kw := pl.kube
	now := pl.opts.Now()
	cps := map[string][]netip.Addr{}
	present := map[string]bool{}
	for _, o := range obs {
		present[o.Tenant] = true
		if o.Machine.ControlPlane {
			if a, ok := hostAddr(o.Machine.Address); ok {
				cps[o.Tenant] = append(cps[o.Tenant], a)
			}
		}
	}
	var due []string
	kw.mu.Lock()
	for tenant := range kw.last {
		if !present[tenant] { // gone, or no machine left: forget its credential and clients
			delete(kw.last, tenant)
			delete(kw.ready, tenant)
			delete(kw.missed, tenant)
			kw.clients.Forget(tenant)
		}
	}
	for tenant, up := range talosAPI {
		if up && now.Sub(kw.last[tenant]) >= kubeWait(every, kw.missed[tenant]) {
			due = append(due, tenant)
			kw.last[tenant] = now
		}
	}
	kw.mu.Unlock()
	nodes := map[string]status.Nodes{}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(8)
	for _, tenant := range due {
		b := bundle(tenant)
		endpoint := pl.endpointOf(tenant)
		if b == nil || endpoint == "" {
			continue
		}
		g.Go(func() error {
			o := kw.clients.Observe(ctx, kube.Target{Tenant: tenant, Endpoint: endpoint, ControlPlanes: cps[tenant], Bundle: b})
			if o.URL == "" { // no answer: the Nodes stay as last seen, and an API that answered once is not ready
				kw.mu.Lock()
				if _, reached := kw.ready[tenant]; reached {
					kw.ready[tenant] = false
				}
				kw.missed[tenant]++
				kw.mu.Unlock()
				return nil
			}
			mu.Lock()
			nodes[tenant] = nodesByName(o.Nodes)
			mu.Unlock()
			kw.mu.Lock()
			kw.ready[tenant] = o.Ready
			delete(kw.missed, tenant)
			kw.mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	if len(nodes) > 0 {
		_, err := status.WriteChanged(pl.store, now, func(rec status.Recorder) (bool, error) {
			changed := false
			for tenant, ns := range nodes {
				c, err := rec.KubernetesObserved(tenant, ns)
				if err != nil {
					return false, err
				}
				changed = changed || c
			}
			return changed, nil
		})
		if err != nil {
			pl.log.Warn("record the tenants' Nodes", "err", err)
		}
	}
	api := map[string]bool{}
	kw.mu.Lock()
	defer kw.mu.Unlock()
	for tenant, up := range talosAPI {
		if ready, reached := kw.ready[tenant]; reached {
			up = ready
		}
		api[tenant] = up
	}
	return api
}

// endpointOf is the stored tenant's controlPlaneEndpoint; empty when it
// cannot be read.
func (pl *Plane) endpointOf(tenant string) string {
	var t schema.Tenant
	if err := pl.store.View(func(tx store.Tx) error { return tx.GetObject(schema.KindTenant, tenant, &t) }); err != nil {
		return ""
	}
	return t.Spec.ControlPlaneEndpoint
}

// hostAddr is the IP address of a machine's Talos API address, which may
// carry a port.
func hostAddr(addr string) (netip.Addr, bool) {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	a, err := netip.ParseAddr(addr)
	return a, err == nil
}

func nodesByName(ns []kube.Node) status.Nodes {
	out := status.Nodes{ByName: map[string]schema.MachineKubernetes{}, ByAddress: map[string]string{}}
	for _, n := range ns {
		if n.InternalIP != "" {
			out.ByAddress[n.InternalIP] = n.Name
		}
		k := schema.MachineKubernetes{NodeName: n.Name, Ready: n.Ready, Schedulable: n.Schedulable, KubeletVersion: n.KubeletVersion}
		for _, c := range n.Conditions {
			k.Conditions = append(k.Conditions, schema.NodeCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.Since})
		}
		out.ByName[n.Name] = k
	}
	return out
}
