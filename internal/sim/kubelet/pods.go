package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pods brings the pods bound to the nodes up to date: a pod being deleted
// is removed once its grace period (at most MaxGrace) is over; any other
// runs, Ready while its node is.
func (k *kubelet) pods(ctx context.Context, ready map[string]bool) error {
	list, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	now := time.Now()
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		nodeReady, ours := ready[p.Spec.NodeName]
		if !ours {
			continue
		}
		if p.DeletionTimestamp != nil {
			errs = append(errs, k.finish(ctx, p, now))
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || runs(p, nodeReady) {
			continue
		}
		p.Status = podStatus(p, nodeReady, now)
		if _, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("pod %s/%s status: %w", p.Namespace, p.Name, err))
		}
	}
	return joinErrs(errs)
}

// finish removes a pod being deleted once its grace period is over, as a
// kubelet does after it stopped the pod's containers.
func (k *kubelet) finish(ctx context.Context, p *corev1.Pod, now time.Time) error {
	due := p.DeletionTimestamp.Time
	if p.DeletionGracePeriodSeconds != nil {
		if grace := time.Duration(*p.DeletionGracePeriodSeconds) * time.Second; grace > k.o.MaxGrace {
			due = due.Add(k.o.MaxGrace - grace)
		}
	}
	if now.Before(due) {
		return nil
	}
	zero := int64(0)
	err := k.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("remove pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// runs reports whether p already shows as running its containers' images,
// Ready as its node is.
func runs(p *corev1.Pod, nodeReady bool) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for i, c := range p.Spec.Containers {
		if p.Status.ContainerStatuses[i].Image != c.Image {
			return false
		}
	}
	want := corev1.ConditionFalse
	if nodeReady {
		want = corev1.ConditionTrue
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == want
		}
	}
	return false
}

// podStatus is the status of p running on a node that is ready or not:
// every container started and running, Ready with the node.
func podStatus(p *corev1.Pod, nodeReady bool, now time.Time) corev1.PodStatus {
	ready := corev1.ConditionFalse
	if nodeReady {
		ready = corev1.ConditionTrue
	}
	t := metav1.NewTime(now)
	started := t
	if p.Status.StartTime != nil {
		started = *p.Status.StartTime
	}
	st := corev1.PodStatus{
		Phase: corev1.PodRunning, StartTime: &started, QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: t},
			{Type: corev1.PodReady, Status: ready, LastTransitionTime: t},
		},
	}
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: nodeReady, Started: &nodeReady,
			ContainerID: "containerd://sim-" + string(p.UID)[:8] + "-" + c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		})
	}
	return st
}
