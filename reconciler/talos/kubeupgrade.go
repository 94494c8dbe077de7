package talos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/kube"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// A change of the tenant's Kubernetes version is rolled the way `talosctl
// upgrade-k8s` upgrades Kubernetes: first a check that no client still
// requests an API the new release removes, then one component at a time
// in rtalos.UpgradeOrder (kube-apiserver on each control plane in turn,
// then kube-controller-manager, then kube-scheduler, then the kubelet
// node by node). Each component's step is a rollout of its own: the
// configs that Desired.KubernetesStage renders with the components after
// it held at the old version, applied machine by machine through the
// usual gates, and gated on the component itself running the new
// version, ready (Kubernetes's view of its static pod, or of the Node for
// the kubelet), once the plane has seen the tenant's API. The rollout
// record keeps where the upgrade stands (RolloutRecord.Kubernetes), so
// that a restarted server goes on from there.

// KubeUpgrade is where an upgrade of Kubernetes stands.
type KubeUpgrade struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Next indexes rtalos.UpgradeOrder: the component being moved.
	Next int `json:"next"`
	// Moved are the components moved, with when each was done.
	Moved     []ComponentMoved `json:"moved,omitempty"`
	StartedAt time.Time        `json:"startedAt"`
	// Checked is set once the check of requested deprecated APIs passed.
	Checked bool `json:"checked,omitempty"`
	// Snapshot is the backup of etcd the upgrade relied on, taken before
	// its first component moved.
	Snapshot *Relied `json:"snapshot,omitempty"`
}

// ComponentMoved is one component an upgrade moved.
type ComponentMoved struct {
	Component string    `json:"component"`
	At        time.Time `json:"at"`
}

// String says where the upgrade stands: "Kubernetes 1.36.4 → 1.37.1:
// kube-apiserver (1 of 4)".
func (u *KubeUpgrade) String() string {
	if u.Next >= len(rtalos.UpgradeOrder) {
		return fmt.Sprintf("Kubernetes %s → %s: done", u.From, u.To)
	}
	return fmt.Sprintf("Kubernetes %s → %s: %s (%d of %d)", u.From, u.To, rtalos.UpgradeOrder[u.Next], u.Next+1, len(rtalos.UpgradeOrder))
}

// component is the component being moved, "" once all are.
func (u *KubeUpgrade) component() string {
	if u == nil || u.Next >= len(rtalos.UpgradeOrder) {
		return ""
	}
	return rtalos.UpgradeOrder[u.Next]
}

// kubeUpgrade returns the upgrade of Kubernetes that d asks for, started
// or gone on with, or nil when d asks for none (the version is the one
// the machines run, the plane first sees the tenant, or d cannot render
// a component's step).
func (pl *Plane) kubeUpgrade(d Desired) (*KubeUpgrade, error) {
	rec := &RolloutRecord{}
	found, err := pl.load(KindRollout, d.Tenant, rec)
	if err != nil || !found || d.KubernetesStage == nil {
		return nil, err
	}
	from := rec.KubernetesVersion
	if from == "" || from == d.KubernetesVersion {
		if rec.Kubernetes.component() != "" { // given up: the version went back
			rec.Kubernetes = nil
			return nil, pl.save(KindRollout, d.Tenant, rec)
		}
		return nil, nil
	}
	u := rec.Kubernetes
	if u == nil || u.To != d.KubernetesVersion || u.From != from {
		u = &KubeUpgrade{From: from, To: d.KubernetesVersion, StartedAt: pl.opts.Now()}
		rec.Kubernetes = u
		if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
			return nil, err
		}
		pl.log.Info("kubernetes upgrade", "tenant", d.Tenant, "from", u.From, "to", u.To)
	}
	return u, nil
}

// rollKubernetes rolls an upgrade of Kubernetes, one component after the
// other, and returns once every component runs the new version (the last
// step is d itself).
func (pl *Plane) rollKubernetes(ctx context.Context, d Desired, u *KubeUpgrade) (Rolled, error) {
	var total Rolled
	if !u.Checked {
		if err := pl.checkDeprecated(ctx, d, u); err != nil {
			return total, err
		}
		u.Checked = true
		if err := pl.saveUpgrade(d.Tenant, u); err != nil {
			return total, err
		}
	}
	save := func() error { return pl.saveUpgrade(d.Tenant, u) }
	if err := pl.snapshotBefore(ctx, d, &u.Snapshot, "the upgrade of Kubernetes to "+u.To, save); err != nil {
		return total, err
	}
	for u.Next < len(rtalos.UpgradeOrder) {
		step, err := pl.kubeStep(d, u)
		if err != nil {
			return total, err
		}
		done, err := pl.roll(ctx, step)
		total.merge(done)
		if err != nil {
			return total, err
		}
		pl.log.Info("kubernetes upgrade", "tenant", d.Tenant, "moved", u.component(), "to", u.To)
		u.Moved = append(u.Moved, ComponentMoved{Component: u.component(), At: pl.opts.Now()})
		u.Next++
		if err := pl.saveUpgrade(d.Tenant, u); err != nil {
			return total, err
		}
	}
	return total, nil
}

// kubeStep is d with the configs of the step that moves u's next
// component: the components after it held at u.From. The last step is d
// itself, which completes the rollout at the new version.
func (pl *Plane) kubeStep(d Desired, u *KubeUpgrade) (Desired, error) {
	step := d
	step.kubeUpgrade = u
	if u.Next == len(rtalos.UpgradeOrder)-1 {
		return step, nil
	}
	groups, machines, err := d.KubernetesStage(u.From, u.Next+1)
	if err != nil {
		return d, fmt.Errorf("the configs of the step that moves %s to %s: %w", u.component(), u.To, err)
	}
	step.Groups = map[string]GroupTarget{}
	for name, g := range d.Groups {
		g.Config = groups[name]
		step.Groups[name] = g
	}
	step.Configs = machines
	step.KubernetesVersion = u.From
	return step, nil
}

// saveUpgrade writes u into the tenant's rollout record as it is stored
// now (roll writes the record between the steps).
func (pl *Plane) saveUpgrade(tenant string, u *KubeUpgrade) error {
	rec := &RolloutRecord{}
	if _, err := pl.load(KindRollout, tenant, rec); err != nil {
		return err
	}
	rec.Kubernetes = u
	if u.Next >= len(rtalos.UpgradeOrder) && rec.Completed {
		rec.KubernetesVersion = u.To
	}
	return pl.save(KindRollout, tenant, rec)
}

// checkDeprecated refuses to start an upgrade while clients request APIs
// that the new release removes. A tenant whose Kubernetes API the plane
// has not seen is not checked; one whose API does not answer waits for
// it, unless its drain policy says proceed.
func (pl *Plane) checkDeprecated(ctx context.Context, d Desired, u *KubeUpgrade) error {
	if !d.kubeSeen() {
		return nil
	}
	apis, err := pl.kube.clients.DeprecatedAPIs(ctx, d.kubeTarget(), u.To)
	switch {
	case unreachableAPI(err) && d.proceedUnreachable():
		return nil
	case err != nil:
		return &WaitingError{Tenant: d.Tenant, Reason: fmt.Sprintf("the Kubernetes API, to check for deprecated APIs before the upgrade to %s: %v", u.To, err)}
	case len(apis) > 0:
		return &WaitingError{Tenant: d.Tenant, Cause: schema.ReasonDeprecatedAPIsRequested, Reason: fmt.Sprintf(
			"the upgrade of Kubernetes from %s to %s waits: clients still request APIs that it removes: %s; move them to the APIs that replace these; the API servers count requests from their last restart",
			u.From, u.To, strings.Join(apis, ", "))}
	}
	return nil
}

// componentReady is the gate of an upgrade's step after machine m: the
// component being moved runs the new version on it and is ready. The
// static pods are only on control planes; the kubelet is on every node.
func (pl *Plane) componentReady(ctx context.Context, d Desired, m Machine) (ok bool, why string) {
	c := d.kubeUpgrade.component()
	if c == "" || m.Node == "" || (c != kube.Kubelet && !m.ControlPlane) {
		return true, ""
	}
	problem, err := pl.kube.clients.Component(ctx, d.kubeTarget(), m.Node, c, d.kubeUpgrade.To)
	switch {
	case unreachableAPI(err) && d.drainPolicy(m).Proceed:
		return true, ""
	case err != nil:
		return false, fmt.Sprintf("%s at %s: %v", c, d.kubeUpgrade.To, err)
	case problem != "":
		return false, fmt.Sprintf("%s at %s: %s", c, d.kubeUpgrade.To, problem)
	}
	return true, ""
}

// kubeSeen reports whether the plane has seen the tenant's Kubernetes
// API: some machine has a Node.
func (d Desired) kubeSeen() bool {
	for _, m := range d.Machines {
		if m.Node != "" {
			return true
		}
	}
	return false
}

// proceedUnreachable reports whether every node group's drain policy
// goes on without the Kubernetes API.
func (d Desired) proceedUnreachable() bool {
	for _, m := range d.Machines {
		if !d.drainPolicy(m).Proceed {
			return false
		}
	}
	return true
}
