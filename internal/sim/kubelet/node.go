package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and taints a Talos node's kubelet registers with.
const (
	labelControlPlane = "node-role.kubernetes.io/control-plane"
	leaseNamespace    = "kube-node-lease"
	leaseSeconds      = 40
)

// report registers n's Node with its status if it has none, as a kubelet
// does (so that no reader sees a Node without conditions), and writes its
// status when it changed since the last write.
func (k *kubelet) report(ctx context.Context, n Node) error {
	nodes := k.cs.CoreV1().Nodes()
	cur, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !k.reported(n.Name) {
		return nil // the node stopped since the round began: its Node was deleted for it
	}
	if apierrors.IsNotFound(err) {
		delete(k.sent, n.Name)
		node := newNode(n)
		node.Status = nodeStatus(n, corev1.NodeStatus{}, time.Now())
		if cur, err = nodes.Create(ctx, node, metav1.CreateOptions{}); err == nil && readyOf(cur) != corev1.ConditionUnknown {
			k.sent[n.Name] = n
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if last, ok := k.sent[n.Name]; ok && last.equal(n) && readyOf(cur) != corev1.ConditionUnknown {
		return nil
	}
	cur.Status = nodeStatus(n, cur.Status, time.Now())
	if _, err := nodes.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", n.Name, err)
	}
	k.sent[n.Name] = n
	return nil
}

// reported reports whether the node named name is among those the
// kubelet reports now: asked again before a Node is registered, so that
// the Node of a node that stopped during the round (a reset, after which
// its Node is deleted) is not registered again.
func (k *kubelet) reported(name string) bool {
	return slices.ContainsFunc(k.o.Nodes(), func(n Node) bool { return n.Name == name })
}

// newNode is n's Node as a Talos node's kubelet registers it: control
// planes labelled and tainted so that workloads go to the workers.
func newNode(n Node) *corev1.Node {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
		"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
	}}}
	if n.ControlPlane {
		node.Labels[labelControlPlane] = ""
		node.Spec.Taints = []corev1.Taint{{Key: labelControlPlane, Effect: corev1.TaintEffectNoSchedule}}
	}
	return node
}

// nodeStatus is the status n reports at now; the conditions keep their
// transition times while they hold.
func nodeStatus(n Node, old corev1.NodeStatus, now time.Time) corev1.NodeStatus {
	ready, reason, msg := corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"
	if !n.Ready {
		ready, reason, msg = corev1.ConditionFalse, n.Reason, n.Message
		if reason == "" {
			reason = "KubeletNotReady"
		}
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == s {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		return c
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	return corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, ready, reason, msg),
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.Address}, {Type: corev1.NodeHostName, Address: n.Name}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: n.KubeletVersion, OSImage: n.OSImage, OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "containerd://2.1.5", KernelVersion: "6.18.0-talos",
		},
	}
}

// readyOf is the Node's Ready status; Unknown when it has none, or when
// the controller-manager took the node for lost.
func readyOf(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// renew renews the node's Lease in kube-node-lease when it is due.
func (k *kubelet) renew(ctx context.Context, name string) error {
	now := time.Now()
	if now.Sub(k.renewed[name]) < k.o.LeaseRenew {
		return nil
	}
	leases := k.cs.CoordinationV1().Leases(leaseNamespace)
	renew := metav1.NewMicroTime(now)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		holder, secs := name, int32(leaseSeconds)
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: leaseNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &renew}}, metav1.CreateOptions{})
	case err == nil:
		l.Spec.RenewTime = &renew
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("lease of node %s: %w", name, err)
	}
	k.renewed[name] = now
	return nil
}

func joinErrs(errs []error) error { return errors.Join(errs...) }
