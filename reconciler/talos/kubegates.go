package talos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/kube"
)

// After an operation, the next machine of a rollout starts only when the
// gates open, in this order: the machine is back and ready at its config
// or version; for a control plane, every etcd member is healthy; its
// Kubernetes Node is Ready again, then uncordoned (when it was drained);
// for a control plane, the Kubernetes API's /readyz says ok; in a step
// of an upgrade of Kubernetes, the component it moves runs the new
// version on the machine, ready (kubeupgrade.go); and the
// workloads that the tenant's spec.rollout.waitFor selects are fully
// available. The Kubernetes gates are asked only of a tenant whose API
// the plane has seen (the machine has a Node), and an API that does not
// answer keeps them closed unless the drain policy says proceed. The time
// each gate took to open, counted from the call, is kept in the
// operation's record (Operation.Gates).

// Gates after an operation, as Operation.Gates names them.
const (
	GateMachine   = "machine"
	GateEtcd      = "etcd"
	GateNode      = "node"
	GateAPI       = "apiReadyz"
	GateWorkloads = "workloads"
	// GateComponent: in a step of an upgrade of Kubernetes, the
	// component being moved runs the new version on the machine, ready.
	GateComponent = "component"
)

// GateTime is when one gate after an operation opened.
type GateTime struct {
	Gate string `json:"gate"`
	// After is the time from the call to the gate's opening.
	After time.Duration `json:"after"`
}

// opened notes that a gate of the current operation opened, once.
func (pl *Plane) opened(op *Operation, gate string) {
	for _, g := range op.Gates {
		if g.Gate == gate {
			return
		}
	}
	after := time.Duration(0)
	if !op.IssuedAt.IsZero() {
		after = pl.opts.Now().Sub(op.IssuedAt)
	}
	op.Gates = append(op.Gates, GateTime{Gate: gate, After: after})
}

// gatesOpen reports whether the current operation of machine m is done:
// its verdict says so and every gate after it is open. why says what it
// waits for when not.
func (pl *Plane) gatesOpen(ctx context.Context, d Desired, rec *RolloutRecord, m Machine, v verdictKind) (ok bool, why string, err error) {
	op := rec.Current
	if v != verdictDone {
		return false, "", nil
	}
	pl.opened(op, GateMachine)
	if m.ControlPlane {
		if e := pl.etcdHealthy(ctx, d); e != "" {
			return false, "every etcd member to be healthy: " + e, nil
		}
		pl.opened(op, GateEtcd)
	}
	if ok, why, err := pl.nodeBack(ctx, d, rec); err != nil || !ok {
		return false, why, err
	}
	pl.opened(op, GateNode)
	if m.Node == "" {
		return true, "", nil
	}
	proceed := d.drainPolicy(m).Proceed
	if m.ControlPlane {
		problem, err := pl.kube.clients.Readyz(ctx, d.kubeTarget())
		switch {
		case unreachableAPI(err) && proceed:
		case err != nil:
			return false, "the Kubernetes API: " + err.Error(), nil
		case problem != "":
			return false, "the Kubernetes API to be ready: " + problem, nil
		}
		pl.opened(op, GateAPI)
	}
	if d.kubeUpgrade != nil {
		if ok, why := pl.componentReady(ctx, d, m); !ok {
			return false, why, nil
		}
		pl.opened(op, GateComponent)
	}
	if d.WaitFor != "" {
		left, err := pl.kube.clients.Unavailable(ctx, d.kubeTarget(), d.WaitFor)
		switch {
		case unreachableAPI(err) && proceed:
		case err != nil:
			return false, fmt.Sprintf("the workloads of %q: %v", d.WaitFor, err), nil
		case len(left) > 0:
			return false, fmt.Sprintf("the workloads of %q to be available: %s", d.WaitFor, strings.Join(left, "; ")), nil
		}
		pl.opened(op, GateWorkloads)
	}
	return true, "", nil
}

// unreachableAPI reports whether err says that the tenant's Kubernetes
// API did not answer.
func unreachableAPI(err error) bool {
	var u *kube.UnreachableError
	return errors.As(err, &u)
}
