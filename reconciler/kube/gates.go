package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Readyz asks the API's /readyz; problem says what it answered when it
// is not ready. The error is an *UnreachableError when no address
// answered.
func (c *Clients) Readyz(ctx context.Context, t Target) (problem string, err error) {
	_, err = c.with(ctx, t, func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		switch {
		case err == nil && strings.TrimSpace(string(body)) == "ok":
			problem = ""
		case err == nil:
			problem = "/readyz: " + oneLine(fmt.Errorf("%s", body))
		case connectionError(err):
			return err
		default:
			problem = "/readyz: " + oneLine(err)
		}
		return nil
	})
	return problem, err
}

// Unavailable lists the Deployments, StatefulSets and DaemonSets of every
// namespace that the label selector picks and that are not fully
// available at their current spec: "Deployment shop/web: 2 of 3
// available". An empty list means all are.
func (c *Clients) Unavailable(ctx context.Context, t Target, selector string) ([]string, error) {
	var out []string
	_, err := c.with(ctx, t, func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		out = nil
		opts := metav1.ListOptions{LabelSelector: selector}
		deps, err := cs.AppsV1().Deployments("").List(ctx, opts)
		if err != nil {
			return err
		}
		for _, d := range deps.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			s := d.Status
			if s.ObservedGeneration < d.Generation || s.UpdatedReplicas < want || s.AvailableReplicas < want || s.Replicas > want {
				out = append(out, fmt.Sprintf("Deployment %s/%s: %d of %d available, %d updated", d.Namespace, d.Name, s.AvailableReplicas, want, s.UpdatedReplicas))
			}
		}
		sets, err := cs.AppsV1().StatefulSets("").List(ctx, opts)
		if err != nil {
			return err
		}
		for _, st := range sets.Items {
			want := int32(1)
			if st.Spec.Replicas != nil {
				want = *st.Spec.Replicas
			}
			s := st.Status
			if s.ObservedGeneration < st.Generation || s.AvailableReplicas < want || s.UpdatedReplicas < want {
				out = append(out, fmt.Sprintf("StatefulSet %s/%s: %d of %d available, %d updated", st.Namespace, st.Name, s.AvailableReplicas, want, s.UpdatedReplicas))
			}
		}
		daemons, err := cs.AppsV1().DaemonSets("").List(ctx, opts)
		if err != nil {
			return err
		}
		for _, ds := range daemons.Items {
			s := ds.Status
			if s.ObservedGeneration < ds.Generation || s.NumberAvailable < s.DesiredNumberScheduled || s.UpdatedNumberScheduled < s.DesiredNumberScheduled {
				out = append(out, fmt.Sprintf("DaemonSet %s/%s: %d of %d available, %d updated", ds.Namespace, ds.Name, s.NumberAvailable, s.DesiredNumberScheduled, s.UpdatedNumberScheduled))
			}
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}
