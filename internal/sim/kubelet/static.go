package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mirror pods are in kube-system, labelled as kubeadm and Talos label the
// control plane's static pods.
const (
	staticNamespace   = "kube-system"
	labelComponent    = "k8s-app"
	labelTier         = "tier"
	annotationMirror  = "kubernetes.io/config.mirror"
	annotationSource  = "kubernetes.io/config.source"
	controlPlaneTier  = "control-plane"
	staticPodSelector = labelTier + "=" + controlPlaneTier
)

// staticPods makes the mirror pod of every static pod of the nodes, named
// COMPONENT-NODE as a kubelet names them. A static pod whose image
// changed is restarted, as a kubelet restarts it: its mirror pod is
// replaced by one of the new image, which pods then reports running.
func (k *kubelet) staticPods(ctx context.Context, nodes []Node) error {
	pods := k.cs.CoreV1().Pods(staticNamespace)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: staticPodSelector})
	if err != nil {
		return fmt.Errorf("list static pods: %w", err)
	}
	have := map[string]*corev1.Pod{}
	for i := range list.Items {
		have[list.Items[i].Name] = &list.Items[i]
	}
	var errs []error
	for _, n := range nodes {
		for _, sp := range n.StaticPods {
			name := sp.Component + "-" + n.Name
			cur := have[name]
			if cur != nil && cur.DeletionTimestamp == nil && len(cur.Spec.Containers) == 1 && cur.Spec.Containers[0].Image == sp.Image {
				continue
			}
			if cur != nil {
				zero := int64(0)
				err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				if err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, fmt.Errorf("restart static pod %s: %w", name, err))
					continue
				}
			}
			if err := k.mirror(ctx, n, sp); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return joinErrs(errs)
}

// mirror creates the mirror pod of one static pod of n, owned by n's Node
// as a kubelet owns it.
func (k *kubelet) mirror(ctx context.Context, n Node, sp StaticPod) error {
	node, err := k.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("static pod %s of node %s: %w", sp.Component, n.Name, err)
	}
	sum := sha256.Sum256([]byte(n.Name + "\x00" + sp.Component + "\x00" + sp.Image))
	hash := hex.EncodeToString(sum[:16])
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: sp.Component + "-" + n.Name, Namespace: staticNamespace,
			Labels:          map[string]string{labelComponent: sp.Component, labelTier: controlPlaneTier},
			Annotations:     map[string]string{annotationMirror: hash, annotationSource: "file"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &yes}},
		},
		Spec: corev1.PodSpec{
			NodeName: n.Name, PriorityClassName: "system-cluster-critical", HostNetwork: true,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: sp.Component, Image: sp.Image}},
		},
	}
	_, err = k.cs.CoreV1().Pods(staticNamespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("static pod %s of node %s: %w", sp.Component, n.Name, err)
	}
	return nil
}
