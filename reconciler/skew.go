package reconciler

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// versionSkew is the VersionSkew step: a change of the tenant's
// kubernetesVersion that skips a minor version is refused, as
// Kubernetes's version skew policy refuses it (its components and
// kubelets support one minor version of difference, and `talosctl
// upgrade-k8s` goes one minor version at a time). The run stalls with
// reason InvalidManifests at the field's file:line, and nothing is
// applied. A tenant applied before is compared with the version it was
// applied with.
func (t *tenantRun) versionSkew(context.Context) (stepResult, error) {
	if t.desired == nil || t.prev == nil || t.prev.Model.Tenant == nil {
		return stepNext, nil
	}
	msg := skipsMinor(t.prev.Model.Tenant.KubernetesVersion, t.desired.Tenant.Spec.KubernetesVersion)
	if msg == "" {
		return stepNext, nil
	}
	where := t.desired.Tenant.Source.Position(schema.JSONPointer("spec", "kubernetesVersion"))
	return stepNext, stall(schema.ReasonInvalidManifests, fmt.Errorf("%s: %s", where, msg))
}

// skipsMinor says how an upgrade from one Kubernetes version to another
// skips a minor version; "" when it does not (the same minor, the next
// one, a downgrade, or versions it cannot read).
func skipsMinor(from, to string) string {
	fmaj, fmin, ok1 := majorMinor(from)
	tmaj, tmin, ok2 := majorMinor(to)
	if !ok1 || !ok2 || fmaj != tmaj || tmin <= fmin+1 {
		return ""
	}
	next := fmt.Sprintf("%d.%d", fmaj, fmin+1)
	return fmt.Sprintf("kubernetesVersion %s skips %s: the cluster runs %s, and Kubernetes is upgraded one minor version at a time; upgrade to %s.x first", to, next, from, next)
}

// majorMinor reads the major and minor parts of a version "x.y.z", with
// or without a leading "v".
func majorMinor(v string) (major, minor int, ok bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
