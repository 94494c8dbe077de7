package talos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/kube"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Before a rollout disrupts a machine (an upgrade, a reboot, a config
// that needs a reboot: the operations disrupts names), it drains the
// machine's Kubernetes Node with the node group's policy (Desired.Drains):
// cordon, then evict its pods through the eviction API, which respects
// PodDisruptionBudgets. The Node is recorded in RolloutRecord.Cordoned
// before the cordon. Once the machine is back, the operation is done only
// when its Node is Ready again; then the plane uncordons it. Each Roll
// first uncordons the Nodes recorded of machines no operation holds, so
// that a rollout resumed after a restart, or stopped, leaves none
// cordoned. A machine whose Node the plane never saw (Machine.Node) is
// not drained.

// DrainRecord is what a drain before an operation did.
type DrainRecord struct {
	Node string `json:"node"`
	// Evicted and Forced count the pods evicted, and deleted after the
	// timeout (onTimeout: force).
	Evicted int `json:"evicted"`
	Forced  int `json:"forced,omitempty"`
	// Skipped says why the machine was disrupted undrained (onUnreachable:
	// proceed).
	Skipped string `json:"skipped,omitempty"`
	// Took is how long the cordon and the evictions took.
	Took time.Duration `json:"took"`
	// NodeReadyAfter is how long after the machine was back its Node was
	// Ready again, and then uncordoned.
	NodeReadyAfter time.Duration `json:"nodeReadyAfter,omitempty"`
}

// kubeTarget is the tenant's Kubernetes API as the plane dials it.
func (d Desired) kubeTarget() kube.Target {
	t := kube.Target{Tenant: d.Tenant, Endpoint: d.Endpoint, Bundle: d.Bundle}
	for _, m := range controlPlanes(d.Machines) {
		if a, ok := hostAddr(m.Address); ok {
			t.ControlPlanes = append(t.ControlPlanes, a)
		}
	}
	return t
}

// drainPolicy is the drain policy of machine m's node group.
func (d Desired) drainPolicy(m Machine) schema.Drain {
	if p, ok := d.Drains[m.NodeGroup]; ok {
		return p
	}
	return schema.EffectiveDrain(nil, nil)
}

// drainBefore drains the Node of w's machine when w's operation disrupts
// it, and returns what the drain did for the operation's record (nil when
// there was nothing to drain). A drain that timed out with onTimeout:
// stop, or that the policy refused, stops the rollout there with a
// *StoppedError whose Cause is schema.ReasonDrainTimeout; the Node is
// uncordoned. An API that does not answer gives a *WaitingError, unless
// the policy says proceed.
func (pl *Plane) drainBefore(ctx context.Context, d Desired, rec *RolloutRecord, w work) (*DrainRecord, error) {
	if w.m.Node == "" {
		return nil, nil
	}
	disrupts, err := pl.disrupts(ctx, d, rec, w)
	if err != nil || !disrupts {
		return nil, err
	}
	dr, why, err := pl.drainNode(ctx, d, rec, w.m)
	if err != nil || why == "" {
		return dr, err
	}
	f := &Failure{Generation: rec.Generation, Machine: w.m.ID, Name: w.m.Name, NodeGroup: w.m.NodeGroup, Op: w.op,
		Cause: schema.ReasonDrainTimeout, Reason: why + "; the machine was not disrupted", At: pl.opts.Now()}
	pl.log.Warn("rollout stopped", "tenant", d.Tenant, "machine", w.m.ID, "reason", f.Reason)
	// An upgrade installed before its drain is dropped too: its machine
	// runs the old version, and the next rollout starts it again.
	rec.Current, rec.Failed, rec.UpdatedAt = nil, f, pl.opts.Now()
	if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
		return nil, err
	}
	pl.report(rec, nil)
	return nil, &StoppedError{Tenant: d.Tenant, Machine: w.m.label(), Op: w.op, Cause: f.Cause, Reason: f.Reason}
}

// drainNode records m's Node in rec (when rec is not nil), cordons and
// drains it with its node group's policy. A drain that did not finish
// (timed out with onTimeout: stop, or refused by the policy) uncordons
// the Node again and returns why, naming the pods and budgets.
func (pl *Plane) drainNode(ctx context.Context, d Desired, rec *RolloutRecord, m Machine) (*DrainRecord, string, error) {
	p := d.drainPolicy(m)
	if rec != nil {
		if rec.Cordoned == nil {
			rec.Cordoned = map[string]string{}
		}
		rec.Cordoned[m.ID] = m.Node
		if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
			return nil, "", err
		}
	}
	pl.log.Info("draining", "tenant", d.Tenant, "machine", m.ID, "node", m.Node, "timeout", p.Timeout)
	if rec != nil {
		pl.reportWaiting(rec, nil, fmt.Sprintf("draining node %s of %s (timeout %s)", m.Node, m.label(), p.Timeout))
	}
	dctx, stop := untilNewer(ctx, d.Newer)
	res, err := pl.kube.clients.Drain(dctx, d.kubeTarget(), m.Node, kube.Drain{
		Timeout: p.Timeout, IgnoreDaemonSets: p.IgnoreDaemonSets, DeleteEmptyDirData: p.DeleteEmptyDirData, Force: p.Force})
	newer := stop()
	dr := &DrainRecord{Node: m.Node, Evicted: len(res.Evicted), Forced: len(res.Forced), Took: res.Took}
	var unreachable *kube.UnreachableError
	switch {
	case err != nil && newer && ctx.Err() == nil:
		// Before any other case: a drain cut short is not an API that
		// does not answer, whatever the policy says of that.
		pl.log.Info("drain stopped: a newer revision waits", "tenant", d.Tenant, "machine", m.ID, "node", m.Node, "evicted", len(res.Evicted))
		return nil, "", &SupersededError{Tenant: d.Tenant, Machine: m.label(), Node: m.Node}
	case errors.As(err, &unreachable) && p.Proceed:
		dr.Skipped = "not drained: " + unreachable.Error() + " (onUnreachable: proceed)"
		pl.log.Warn("disrupting a machine undrained", "tenant", d.Tenant, "machine", m.ID, "node", m.Node, "why", unreachable.Problem)
		return dr, "", nil
	case err != nil:
		return nil, "", &WaitingError{Tenant: d.Tenant, Machine: m.label(), Reason: fmt.Sprintf("its node %s to drain: %v", m.Node, err)}
	case res.Refused || (res.TimedOut && !p.Force):
		why := fmt.Sprintf("node %s did not drain within %s (onTimeout: stop)", m.Node, p.Timeout)
		if res.Refused {
			why = fmt.Sprintf("node %s cannot be drained under the drain policy", m.Node)
		}
		if len(res.Blocked) > 0 {
			why += ": " + strings.Join(res.Blocked, "; ")
		}
		if _, err := pl.kube.clients.Cordon(ctx, d.kubeTarget(), m.Node, false); err == nil {
			if rec != nil {
				delete(rec.Cordoned, m.ID)
			}
			why += "; the node was uncordoned"
		}
		return nil, why, nil
	}
	if len(res.Forced) > 0 {
		pl.log.Warn("drain timed out: deleted the pods left", "tenant", d.Tenant, "node", m.Node, "pods", strings.Join(res.Forced, ", "))
	}
	pl.log.Info("drained", "tenant", d.Tenant, "machine", m.ID, "node", m.Node, "evicted", len(res.Evicted), "forced", len(res.Forced), "took", res.Took)
	return dr, "", nil
}

// untilNewer is ctx, cancelled also when newer closes. stop releases it
// and reports whether newer had closed.
func untilNewer(ctx context.Context, newer <-chan struct{}) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	if newer == nil {
		return ctx, func() bool { cancel(); return false }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-newer:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() bool {
		cancel()
		<-done
		select {
		case <-newer:
			return true
		default:
			return false
		}
	}
}

// DrainRemoved drains, one at a time, the Nodes of machines that an apply
// is about to remove (a scale-down, or a replacement), before tofu
// removes them; machines whose Node the plane never saw are skipped. The
// Nodes are recorded as cordoned in the tenant's rollout record, so that
// the next Roll uncordons those of machines that an apply did not remove
// after all. A drain that does not finish gives a *StoppedError with
// Cause schema.ReasonDrainTimeout: the apply must not run.
func (pl *Plane) DrainRemoved(ctx context.Context, d Desired, gone []Machine) error {
	rec := &RolloutRecord{}
	found, err := pl.load(KindRollout, d.Tenant, rec)
	if err != nil {
		return err
	}
	if !found {
		rec = nil // no rollout yet: nothing to record in
	}
	for _, m := range gone {
		if m.Node == "" {
			continue
		}
		_, why, err := pl.drainNode(ctx, d, rec, m)
		if err != nil {
			return err
		}
		if why != "" {
			return &StoppedError{Tenant: d.Tenant, Machine: m.label(), Op: "remove", Cause: schema.ReasonDrainTimeout,
				Reason: why + "; nothing was applied"}
		}
	}
	return nil
}

// DeleteNodes deletes the Nodes of machines an apply removed, once they
// are gone; what fails is logged (a Node left behind is NotReady, and
// deleting it again is harmless).
func (pl *Plane) DeleteNodes(ctx context.Context, d Desired, gone []Machine) {
	for _, m := range gone {
		if m.Node == "" {
			continue
		}
		if err := pl.kube.clients.DeleteNode(ctx, d.kubeTarget(), m.Node); err != nil {
			pl.log.Warn("delete the Node of a removed machine", "tenant", d.Tenant, "machine", m.ID, "node", m.Node, "err", err)
			continue
		}
		pl.log.Info("deleted the Node of a removed machine", "tenant", d.Tenant, "machine", m.ID, "node", m.Node)
	}
}

// nodeBack reports whether the Node of the current operation's machine,
// drained before it, is Ready again, and then uncordons it. It is true
// at once for an operation that drained nothing. why says what it waits
// for.
func (pl *Plane) nodeBack(ctx context.Context, d Desired, rec *RolloutRecord) (ok bool, why string, err error) {
	op := rec.Current
	node, cordoned := rec.Cordoned[op.Machine]
	if op.Drain == nil || op.Drain.Skipped != "" || !cordoned {
		return true, "", nil
	}
	s, err := pl.kube.clients.Node(ctx, d.kubeTarget(), node)
	switch {
	case err != nil:
		return false, fmt.Sprintf("its node %s: %v", node, err), nil
	case s.Found && !s.Ready:
		return false, fmt.Sprintf("its node %s to be Ready in Kubernetes", node), nil
	}
	if _, err := pl.kube.clients.Cordon(ctx, d.kubeTarget(), node, false); err != nil {
		return false, fmt.Sprintf("uncordon its node %s: %v", node, err), nil
	}
	if !op.IssuedAt.IsZero() {
		op.Drain.NodeReadyAfter = pl.opts.Now().Sub(op.IssuedAt)
	}
	delete(rec.Cordoned, op.Machine)
	pl.log.Info("uncordoned", "tenant", d.Tenant, "machine", op.Machine, "node", node)
	return true, "", pl.save(KindRollout, d.Tenant, rec)
}

// uncordonLeft uncordons the Nodes the rollout cordoned whose machines no
// operation holds now (a restart came between the cordon and the
// operation, or the rollout stopped); a Node that is not Ready gets no
// pods all the same. Those of machines gone are forgotten. What fails is
// tried again on the next Roll, and a rollout does not complete while
// one is left (leftCordoned).
func (pl *Plane) uncordonLeft(ctx context.Context, d Desired, rec *RolloutRecord) error {
	changed := false
	for id, node := range rec.Cordoned {
		if rec.Current != nil && rec.Current.Machine == id {
			continue
		}
		if _, ok := machineByID(d, id); !ok {
			delete(rec.Cordoned, id)
			changed = true
			continue
		}
		if _, err := pl.kube.clients.Cordon(ctx, d.kubeTarget(), node, false); err != nil {
			pl.log.Warn("uncordon", "tenant", d.Tenant, "node", node, "err", err)
			continue
		}
		pl.log.Info("uncordoned", "tenant", d.Tenant, "machine", id, "node", node)
		delete(rec.Cordoned, id)
		changed = true
	}
	if !changed {
		return nil
	}
	return pl.save(KindRollout, d.Tenant, rec)
}

// leftCordoned returns a *WaitingError when the rollout has Nodes left
// cordoned (the tenant's API did not answer uncordonLeft), so that the
// rollout is not complete until they are uncordoned.
func leftCordoned(d Desired, rec *RolloutRecord) error {
	if len(rec.Cordoned) == 0 {
		return nil
	}
	nodes := slices.Sorted(maps.Values(rec.Cordoned))
	return &WaitingError{Tenant: d.Tenant, Reason: "the Kubernetes API, to uncordon the nodes the rollout cordoned: " + strings.Join(nodes, ", ")}
}
