package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
)

// Drain is how a node is drained.
type Drain struct {
	// Timeout bounds the evictions; 0 means 10 minutes.
	Timeout            time.Duration
	IgnoreDaemonSets   bool
	DeleteEmptyDirData bool
	// Force: once Timeout has passed, delete the pods left, whatever
	// their PodDisruptionBudgets say, and pods no controller manages.
	Force bool
}

// Drained is what a drain did.
type Drained struct {
	// URL is the address of the API that answered.
	URL string
	// Evicted are the pods evicted (namespace/name); Forced those deleted
	// after the timeout.
	Evicted, Forced []string
	// Blocked says, when the drain did not finish (TimedOut or Refused),
	// which pods were left and why: the PodDisruptionBudget that allowed
	// no disruption, or what kubectl's drain refused.
	Blocked []string
	// TimedOut: the evictions did not finish within the timeout.
	TimedOut bool
	// Refused: the node has pods that the policy does not let a drain
	// evict (DaemonSet pods, emptyDir data, pods of no controller).
	Refused bool
	Took    time.Duration
}

// UnreachableError says that no address of the tenant's API answered.
type UnreachableError struct{ Problem string }

func (e *UnreachableError) Error() string { return "the Kubernetes API does not answer: " + e.Problem }

// evictRetry is how long an eviction that a PodDisruptionBudget refused
// waits before it is asked again.
const evictRetry = time.Second

// with runs fn with the client of the first address of the tenant's API
// that answers; fn's error is the API's answer. It returns the URL that
// answered, or an *UnreachableError when none did.
func (c *Clients) with(ctx context.Context, t Target, fn func(kubernetes.Interface) error) (string, error) {
	urls := URLs(t.Endpoint, t.ControlPlanes)
	if len(urls) == 0 {
		return "", &UnreachableError{Problem: "no address to dial: the endpoint names no IP address and no control plane has one"}
	}
	tc := c.tenant(t)
	var tried []string
	for _, u := range tc.order(urls) {
		cs, err := c.client(ctx, tc, t.Bundle, u)
		var ce *credentialError
		if errors.As(err, &ce) {
			return "", ce
		}
		if err == nil {
			if err = fn(cs); err == nil || !connectionError(err) || ctx.Err() != nil {
				c.mu.Lock()
				tc.lastURL = u
				c.mu.Unlock()
				return u, err
			}
		}
		c.forgetURL(tc, u)
		tried = append(tried, u+": "+oneLine(err))
	}
	return "", &UnreachableError{Problem: strings.Join(tried, "; ")}
}

// connectionError tells an error of the connection to an address (it
// was refused, timed out, or TLS failed) from any other.
func connectionError(err error) bool {
	var ue *url.Error
	var oe *net.OpError
	return errors.As(err, &ue) || errors.As(err, &oe)
}

// NodeState is what the API says of one Node.
type NodeState struct {
	Found, Ready, Schedulable bool
	KubeletVersion            string
}

// Node reads one Node; Found is false when there is none of that name.
func (c *Clients) Node(ctx context.Context, t Target, name string) (NodeState, error) {
	var s NodeState
	err := c.withNode(ctx, t, name, func(_ context.Context, _ kubernetes.Interface, n *corev1.Node) error {
		o := nodeOf(n)
		s = NodeState{Found: true, Ready: o.Ready, Schedulable: o.Schedulable, KubeletVersion: o.KubeletVersion}
		return nil
	})
	return s, err
}

// Cordon marks a node unschedulable (on) or schedulable again (off). A
// node that does not exist is no error: found says whether it did.
func (c *Clients) Cordon(ctx context.Context, t Target, name string, on bool) (found bool, err error) {
	err = c.withNode(ctx, t, name, func(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) error {
		found = true
		return drain.RunCordonOrUncordon(&drain.Helper{Ctx: ctx, Client: cs}, n, on)
	})
	return found, err
}

// withNode reads the Node name at the first address that answers and
// runs fn with it, within one request timeout; a Node that does not
// exist runs nothing and is no error.
func (c *Clients) withNode(ctx context.Context, t Target, name string, fn func(context.Context, kubernetes.Interface, *corev1.Node) error) error {
	_, err := c.with(ctx, t, func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fn(ctx, cs, n)
	})
	return err
}

// DeleteNode deletes a node; one already gone is no error.
func (c *Clients) DeleteNode(ctx context.Context, t Target, name string) error {
	_, err := c.with(ctx, t, func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	return err
}

// Drain cordons a node and evicts its pods through the eviction API,
// with k8s.io/kubectl's drain package, which respects
// PodDisruptionBudgets. It returns when every pod is gone, or when the
// timeout passed (with Force, the pods left are then deleted) or the
// policy refused a pod. A node that does not exist has nothing to drain.
// The error is the API's: an *UnreachableError when it did not answer.
func (c *Clients) Drain(ctx context.Context, t Target, node string, p Drain) (Drained, error) {
	start := time.Now()
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Minute
	}
	var res Drained
	found, err := c.Cordon(ctx, t, node, true)
	if err != nil || !found {
		return res, err
	}
	res.URL, err = c.with(ctx, t, func(cs kubernetes.Interface) error {
		res = Drained{}
		return evict(ctx, cs, node, p, time.Now(), &res)
	})
	res.Took = time.Since(start)
	return res, err
}

// evict drains node with the client cs; it fills res.
func evict(ctx context.Context, cs kubernetes.Interface, node string, p Drain, start time.Time, res *Drained) error {
	var mu sync.Mutex
	var errOut bytes.Buffer
	h := &drain.Helper{
		Ctx: ctx, Client: cs, GracePeriodSeconds: -1, Timeout: p.Timeout,
		IgnoreAllDaemonSets: p.IgnoreDaemonSets, DeleteEmptyDirData: p.DeleteEmptyDirData,
		EvictErrorRetryDelay: evictRetry, Out: discard{}, ErrOut: &lockedBuffer{mu: &mu, b: &errOut},
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, _ bool, err error) {
			if err == nil {
				mu.Lock()
				res.Evicted = append(res.Evicted, pod.Namespace+"/"+pod.Name)
				mu.Unlock()
			}
		},
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		if list == nil { // the pods could not be listed
			return errors.Join(errs...)
		}
		if !p.Force {
			res.Refused = true
			for _, e := range errs {
				res.Blocked = append(res.Blocked, oneLine(e))
			}
			return nil
		}
		h.Force = true // pods of no controller are deleted, as kubectl drain --force does
		if list, errs = h.GetPodsForDeletion(node); len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	err := h.DeleteOrEvictPods(list.Pods())
	slices.Sort(res.Evicted)
	if err == nil {
		return nil
	}
	// The helper's timeout ends the evictions still refused ("global
	// timeout reached") and the waits for evicted pods to go (a deadline).
	if time.Since(start) < p.Timeout && !strings.Contains(err.Error(), "global timeout reached") {
		return err
	}
	res.TimedOut = true
	left, lerr := podsLeft(ctx, cs, node, list.Pods())
	if lerr != nil {
		return lerr
	}
	res.Blocked = blockers(ctx, cs, left)
	if !p.Force {
		return nil
	}
	h.DisableEviction, h.Timeout = true, time.Minute
	if err := h.DeleteOrEvictPods(left); err != nil {
		return fmt.Errorf("delete the pods left after the timeout: %w", err)
	}
	for _, pod := range left {
		res.Forced = append(res.Forced, pod.Namespace+"/"+pod.Name)
	}
	return nil
}

// podsLeft are those of pods still on node and not being deleted.
func podsLeft(ctx context.Context, cs kubernetes.Interface, node string, pods []corev1.Pod) ([]corev1.Pod, error) {
	var left []corev1.Pod
	for _, p := range pods {
		cur, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		case cur.UID == p.UID && cur.Spec.NodeName == node && cur.DeletionTimestamp == nil:
			left = append(left, *cur)
		}
	}
	return left, nil
}

// blockers names, for each pod left, the PodDisruptionBudgets of its
// namespace that select it and allow no disruption.
func blockers(ctx context.Context, cs kubernetes.Interface, pods []corev1.Pod) []string {
	var out []string
	for _, pod := range pods {
		why := "not evicted within the timeout"
		pdbs, err := cs.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, b := range pdbs.Items {
				sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
				if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) || b.Status.DisruptionsAllowed > 0 {
					continue
				}
				why = fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption (%d healthy, %d desired)",
					b.Namespace, b.Name, b.Status.CurrentHealthy, b.Status.DesiredHealthy)
				break
			}
		}
		out = append(out, fmt.Sprintf("pod %s/%s: %s", pod.Namespace, pod.Name, why))
	}
	slices.Sort(out)
	return out
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// lockedBuffer is the drain helper's error output, written from its
// goroutines.
type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		return len(p), nil
	}
	return l.b.Write(p)
}
