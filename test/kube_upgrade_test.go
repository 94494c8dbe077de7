package test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rezuscloud/rezuscloud/schema"
)

// The versions of the Kubernetes upgrade test: the simulated cloud's API
// server (v1.37) emulates the older one, and serves
// networking.k8s.io/v1beta1, which the newer one removes, when the
// config's runtime-config asks for it.
const (
	upgradeTalos   = "1.14.1"
	upgradeFrom    = "1.36.4"
	upgradeTo      = "1.37.1"
	upgradeRemoved = "ipaddresses.v1beta1.networking.k8s.io (removed in 1.37)"
)

// componentMoves follows, from the test, when each Kubernetes component
// of each node first ran a version: the mirror pods of the control
// plane's static pods (image tag, Ready) and the Nodes' kubelets.
type componentMoves struct {
	mu   sync.Mutex
	at   map[string]time.Time // "component node" → when it ran the version, ready
	stop context.CancelFunc
	done chan struct{}
}

func followComponents(cs kubernetes.Interface, version string) *componentMoves {
	ctx, cancel := context.WithCancel(context.Background())
	f := &componentMoves{at: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	want := "v" + version
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			f.look(ctx, cs, want)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return f
}

// look notes the components it sees at want; an API server that restarts
// meanwhile does not answer, which is no error.
func (f *componentMoves) look(ctx context.Context, cs kubernetes.Interface, want string) {
	now := time.Now()
	seen := map[string]bool{}
	if pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "tier=control-plane"}); err == nil {
		for _, p := range pods.Items {
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == "Ready" && c.Status == "True")
			}
			if len(p.Status.ContainerStatuses) == 1 && strings.HasSuffix(p.Status.ContainerStatuses[0].Image, ":"+want) && ready {
				seen[p.Labels["k8s-app"]+" "+p.Spec.NodeName] = true
			}
		}
	}
	if nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion == want {
				seen["kubelet "+n.Name] = true
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range seen {
		if _, ok := f.at[k]; !ok {
			f.at[k] = now
		}
	}
}

func (f *componentMoves) finish() map[string]time.Time {
	f.stop()
	<-f.done
	return f.at
}

// TestKubernetesUpgrade, end to end through the server, tofu, the sim
// provider, the simulated nodes and a real kube-apiserver: a tenant on
// Kubernetes 1.36 whose control plane serves networking.k8s.io/v1beta1.
// Once a client requested IPAddresses at v1beta1, an upgrade to 1.37,
// which removes that API, waits (Ready False, DeprecatedAPIsRequested,
// retried) naming it,
// and no machine gets a new config. After a restart of the API servers
// (the server's, which restarts the simulated cloud's) with no request
// since, the upgrade goes on: the API server, the controller-manager, the
// scheduler and then each kubelet run 1.37 in that order, the tenant's
// status said which component was moving, and the API server emulates
// 1.37 at the end.
func TestKubernetesUpgrade(t *testing.T) {
	// Talos 1.14 gives the API server a document of its own, which the
	// patch merges into; the staging example's worker patch is of the
	// former layout, so the tenant has this patch alone.
	patch := "apiVersion: rezuscloud.io/v1\nkind: ConfigPatch\nmetadata:\n  name: networking-v1beta1\n  labels:\n    rezuscloud.io/tenant: k8s\nspec:\n  targetRole: controlplane\n" +
		"  patch: |\n    apiVersion: v1alpha1\n    kind: KubeAPIServerConfig\n    extraArgs:\n      runtime-config: networking.k8s.io/v1beta1=true\n"
	e, cs := startKubeTenantWith(t, "k8s", 2, "", func(e *e2e) {
		path := e2eManifests + "/k8s/tenant.yaml"
		e.edit(path, `kubernetesVersion: "1.34.1"`, `kubernetesVersion: "`+upgradeFrom+`"`)
		e.edit(path, `talosVersion: "1.12.6"`, `talosVersion: "`+upgradeTalos+`"`)
		e.work.Write(e2eManifests+"/k8s/patches.yaml", patch)
	})
	bg := context.Background()
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.EmulationMinor != "36" {
		t.Fatalf("the API server of a tenant on %s: %+v, %v; want it to emulate 1.36", upgradeFrom, v, err)
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/networking.k8s.io/v1beta1/ipaddresses").DoRaw(bg); err != nil {
		t.Fatalf("a request of networking.k8s.io/v1beta1: %v", err)
	}
	applies := len(planeCalls(t, e, "k8s", "ApplyConfiguration"))

	path := e2eManifests + "/k8s/tenant.yaml"
	e.edit(path, `kubernetesVersion: "`+upgradeFrom+`"`, `kubernetesVersion: "`+upgradeTo+`"`)
	sha := e.push("Upgrade k8s to Kubernetes " + upgradeTo)
	var tn schema.Tenant
	e.srv.WaitFor("the upgrade to wait for the deprecated API", func() bool {
		tn = planeTenant(t, e, "k8s")
		rc := tn.Status.Conditions.Get(schema.ConditionReady)
		return rc != nil && rc.Reason == schema.ReasonDeprecatedAPIsRequested && tn.Status.Retry != nil
	})
	if msg := tn.Status.Message; !strings.Contains(msg, upgradeRemoved) || !strings.Contains(msg, "from "+upgradeFrom+" to "+upgradeTo) {
		t.Errorf("the tenant's message %q does not name %q", msg, upgradeRemoved)
	}
	if n := len(planeCalls(t, e, "k8s", "ApplyConfiguration")); n != applies {
		t.Fatalf("%d configs applied while the upgrade waited, want none", n-applies)
	}

	moves := followComponents(cs, upgradeTo)
	e.srv.Kill()
	e.srv.Start()
	// The commit stays PartiallyFailed from its first attempt until the
	// tenant's retry applies it.
	e.srv.WaitFor("k8s to be applied at "+sha[:12], func() bool {
		tn := planeTenant(t, e, "k8s")
		rc := tn.Status.Conditions.Get(schema.ConditionReady)
		return tn.Status.ObservedCommit == sha && rc != nil && rc.Status == schema.ConditionTrue
	})
	planeWaitReady(t, e, "k8s")
	e.srv.WaitFor("every kubelet at "+upgradeTo, func() bool {
		ms := e.srv.tenantMachines("k8s")
		for _, m := range ms {
			if k := m.Status.Kubernetes; k == nil || k.KubeletVersion != "v"+upgradeTo || !k.Ready {
				return false
			}
		}
		return len(ms) == 3
	})
	at := moves.finish()
	checkComponentOrder(t, e, at)
	if v, err := cs.Discovery().ServerVersion(); err != nil || v.EmulationMinor != "37" {
		t.Errorf("the API server after the upgrade: %+v, %v; want it at 1.37", v, err)
	}
	var said []string
	for _, tn := range planeTenantHistory(t, e, "k8s") {
		if r := tn.Status.Rollout; r != nil && r.Kubernetes != "" && (len(said) == 0 || said[len(said)-1] != r.Kubernetes) {
			said = append(said, r.Kubernetes)
		}
	}
	if len(said) < 2 || !strings.HasPrefix(said[0], "Kubernetes "+upgradeFrom+" → "+upgradeTo+": kube-apiserver (1 of 4)") {
		t.Errorf("status.rollout.kubernetes said %q, want it to start with the API server and move on", said)
	}
	step := func(s string) string { return s[strings.LastIndex(s, "("):] } // "(2 of 4)"
	for i := 1; i < len(said); i++ {
		if step(said[i]) <= step(said[i-1]) {
			t.Errorf("status.rollout.kubernetes did not move on step by step: %q", said)
		}
	}
}

// checkComponentOrder checks that every control plane's API server ran
// the new version before any controller-manager did, those before any
// scheduler, and the schedulers before any kubelet; and that every node
// of the tenant got there.
func checkComponentOrder(t *testing.T, e *e2e, at map[string]time.Time) {
	t.Helper()
	order := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}
	first, last := map[string]time.Time{}, map[string]time.Time{}
	count := map[string]int{}
	for k, when := range at {
		c := strings.SplitN(k, " ", 2)[0]
		count[c]++
		if f, ok := first[c]; !ok || when.Before(f) {
			first[c] = when
		}
		if when.After(last[c]) {
			last[c] = when
		}
	}
	want := map[string]int{"kube-apiserver": 1, "kube-controller-manager": 1, "kube-scheduler": 1, "kubelet": 3}
	for _, c := range order {
		if count[c] != want[c] {
			t.Errorf("%d nodes ran %s at the new version, want %d (seen: %v)", count[c], c, want[c], at)
		}
	}
	for i := 1; i < len(order); i++ {
		if !last[order[i-1]].Before(first[order[i]]) {
			t.Errorf("%s moved (from %s) before every %s had (until %s)", order[i], first[order[i]].Format(time.StampMilli),
				order[i-1], last[order[i-1]].Format(time.StampMilli))
		}
	}
}
