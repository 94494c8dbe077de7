package kube

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// deprecatedMetric is the API server's gauge of the deprecated APIs that
// clients requested since it started, with the release that removes each:
// the signal Kubernetes recommends checking before an upgrade.
const deprecatedMetric = "apiserver_requested_deprecated_apis"

// DeprecatedAPIs lists the APIs that clients requested since the API
// server started and that Kubernetes release target ("1.37.1") or an
// earlier one removes, read from the API server's
// apiserver_requested_deprecated_apis metric: "ipaddresses.v1beta1.
// networking.k8s.io (removed in 1.37)", sorted. An empty list means no
// client requests an API the upgrade would take away.
func (c *Clients) DeprecatedAPIs(ctx context.Context, t Target, target string) ([]string, error) {
	tmaj, tmin, ok := majorMinor(target)
	if !ok {
		return nil, fmt.Errorf("kubernetes version %q: not of the form 1.34.1", target)
	}
	var out []string
	_, err := c.with(ctx, t, func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return err
		}
		out, err = removedBy(body, tmaj, tmin)
		return err
	})
	return out, err
}

// removedBy reads the deprecated APIs that releases up to major.minor
// remove from a metrics page.
func removedBy(page []byte, major, minor int) ([]string, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	var out []string
	for _, m := range families[deprecatedMetric].GetMetric() {
		if m.GetGauge().GetValue() == 0 {
			continue
		}
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		rmaj, rmin, ok := majorMinor(l["removed_release"])
		if !ok || rmaj > major || (rmaj == major && rmin > minor) {
			continue
		}
		name := l["resource"] + "." + l["version"] + "." + l["group"]
		if l["group"] == "" {
			name = l["resource"] + "." + l["version"]
		}
		if l["subresource"] != "" {
			name += "/" + l["subresource"]
		}
		out = append(out, fmt.Sprintf("%s (removed in %s)", name, l["removed_release"]))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// majorMinor reads "1.37" or "1.37.1" (with or without a leading v).
func majorMinor(v string) (int, int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(parts[1])
	return maj, min, err1 == nil && err2 == nil
}

// Kubelet is the name of the kubelet among the components that Component
// checks; the others are the control plane's static pods
// (kube-apiserver, kube-controller-manager, kube-scheduler).
const Kubelet = "kubelet"

// Component says whether a Kubernetes component of a node runs version
// ("1.37.1") and is ready; problem says what it found when it does not.
// The kubelet is its Node, which must report the version and be Ready; a
// static pod is its mirror pod COMPONENT-NODE in kube-system, whose
// container must run an image of that version tag and be Ready.
func (c *Clients) Component(ctx context.Context, t Target, node, component, version string) (problem string, err error) {
	want := "v" + strings.TrimPrefix(version, "v")
	_, err = c.with(ctx, t, func(cs kubernetes.Interface) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		if component == Kubelet {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				problem = "Node " + node + " is not registered"
			case err != nil:
				return err
			default:
				problem = kubeletProblem(n, want)
			}
			return nil
		}
		p, err := cs.CoreV1().Pods("kube-system").Get(ctx, component+"-"+node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			problem = "no pod kube-system/" + component + "-" + node
		case err != nil:
			return err
		default:
			problem = staticPodProblem(p, want)
		}
		return nil
	})
	return problem, err
}

func kubeletProblem(n *corev1.Node, want string) string {
	if v := n.Status.NodeInfo.KubeletVersion; v != want {
		return fmt.Sprintf("Node %s: kubelet %s, not %s yet", n.Name, v, want)
	}
	if s := nodeOf(n); !s.Ready {
		return fmt.Sprintf("Node %s is not Ready", n.Name)
	}
	return ""
}

func staticPodProblem(p *corev1.Pod, want string) string {
	for _, cs := range p.Status.ContainerStatuses {
		if tag := cs.Image[strings.LastIndex(cs.Image, ":")+1:]; tag != want {
			return fmt.Sprintf("pod %s/%s runs %s, not %s yet", p.Namespace, p.Name, cs.Image, want)
		}
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return fmt.Sprintf("pod %s/%s has not started", p.Namespace, p.Name)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return ""
		}
	}
	return fmt.Sprintf("pod %s/%s is not Ready", p.Namespace, p.Name)
}
