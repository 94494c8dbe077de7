package schema

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// DrainPolicy is how the Talos plane drains a machine's Kubernetes node
// before it disrupts the machine (a reboot, an upgrade, a config that
// needs a reboot): it cordons the node and evicts its pods through the
// eviction API, which respects PodDisruptionBudgets. A Tenant's
// spec.drain applies to all its machines; a NodeGroup's spec.drain
// overrides it field by field. Every field may be left out.
type DrainPolicy struct {
	// Timeout is how long the evictions may take, a Go duration; default
	// 10m.
	Timeout string `json:"timeout,omitempty"`
	// IgnoreDaemonSets leaves DaemonSet pods on the node, as
	// `kubectl drain --ignore-daemonsets` does; default true.
	IgnoreDaemonSets *bool `json:"ignoreDaemonSets,omitempty"`
	// DeleteEmptyDirData evicts pods that keep data in an emptyDir,
	// which is lost; default false: such a pod stops the drain.
	DeleteEmptyDirData *bool `json:"deleteEmptyDirData,omitempty"`
	// OnTimeout is what a drain that did not finish in time does: "stop"
	// (the default) stops the rollout before the machine is disrupted,
	// "force" deletes the pods left, whatever their budgets say, and goes
	// on.
	OnTimeout string `json:"onTimeout,omitempty"`
	// OnUnreachable is what happens when the tenant's Kubernetes API does
	// not answer: "wait" (the default) waits for it, "proceed" disrupts
	// the machine undrained.
	OnUnreachable string `json:"onUnreachable,omitempty"`
}

// Drain policy values.
const (
	DrainOnTimeoutStop        = "stop"
	DrainOnTimeoutForce       = "force"
	DrainOnUnreachableWait    = "wait"
	DrainOnUnreachableProceed = "proceed"
	// DefaultDrainTimeout is a drain's timeout when none is declared.
	DefaultDrainTimeout = 10 * time.Minute
)

// Drain is a drain policy with every default filled in.
type Drain struct {
	Timeout            time.Duration
	IgnoreDaemonSets   bool
	DeleteEmptyDirData bool
	// Force: on timeout, delete the pods left and go on.
	Force bool
	// Proceed: disrupt the machine undrained when the API does not
	// answer.
	Proceed bool
}

// EffectiveDrain is the drain policy of a node group's machines: the node
// group's fields over the tenant's, over the defaults. Load has checked
// both, so a field that does not parse keeps its default.
func EffectiveDrain(tenant, group *DrainPolicy) Drain {
	d := Drain{Timeout: DefaultDrainTimeout, IgnoreDaemonSets: true}
	for _, p := range []*DrainPolicy{tenant, group} {
		if p == nil {
			continue
		}
		if t, err := time.ParseDuration(p.Timeout); err == nil && t > 0 {
			d.Timeout = t
		}
		if p.IgnoreDaemonSets != nil {
			d.IgnoreDaemonSets = *p.IgnoreDaemonSets
		}
		if p.DeleteEmptyDirData != nil {
			d.DeleteEmptyDirData = *p.DeleteEmptyDirData
		}
		if p.OnTimeout != "" {
			d.Force = p.OnTimeout == DrainOnTimeoutForce
		}
		if p.OnUnreachable != "" {
			d.Proceed = p.OnUnreachable == DrainOnUnreachableProceed
		}
	}
	return d
}

// checkDrain checks spec.drain.timeout of a Tenant or NodeGroup: a Go
// duration above zero. The schema checks the other fields.
func checkDrain(d *document, obj map[string]any) []Problem {
	const path = "/spec/drain/timeout"
	s, ok := lookup(obj, path).(string)
	if !ok {
		return nil
	}
	if t, err := time.ParseDuration(s); err != nil || t <= 0 {
		return []Problem{d.problem(path, "%s", fmt.Sprintf("%q is not a Go duration above zero, such as 10m", s))}
	}
	return nil
}

// decodeDrain reads spec.drain of a checked document; nil when absent.
func decodeDrain(v any) *DrainPolicy {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	p := &DrainPolicy{Timeout: asString(m["timeout"]), OnTimeout: asString(m["onTimeout"]), OnUnreachable: asString(m["onUnreachable"])}
	if b, ok := m["ignoreDaemonSets"].(bool); ok {
		p.IgnoreDaemonSets = &b
	}
	if b, ok := m["deleteEmptyDirData"].(bool); ok {
		p.DeleteEmptyDirData = &b
	}
	return p
}

// RolloutPolicy is what a Tenant's rollouts wait for between machines,
// beyond the machine itself.
type RolloutPolicy struct {
	// WaitFor is a Kubernetes label selector, such as
	// "app.kubernetes.io/part-of=shop": after each machine, the next one
	// starts only when every Deployment, StatefulSet and DaemonSet of the
	// tenant's cluster that it selects is fully available.
	WaitFor string `json:"waitFor,omitempty"`
}

// checkRollout checks spec.rollout.waitFor of a Tenant: a label selector
// as kubectl -l reads it.
func checkRollout(d *document, obj map[string]any) []Problem {
	const path = "/spec/rollout/waitFor"
	s, ok := lookup(obj, path).(string)
	if !ok {
		return nil
	}
	if _, err := labels.Parse(s); err != nil {
		return []Problem{d.problem(path, "%q is not a label selector: %v", s, err)}
	}
	return nil
}

// decodeRollout reads spec.rollout of a checked Tenant; nil when absent.
func decodeRollout(v any) *RolloutPolicy {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	return &RolloutPolicy{WaitFor: asString(m["waitFor"])}
}
