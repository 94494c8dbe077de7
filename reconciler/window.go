package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/internal/window"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Maintenance windows (a Tenant's spec.maintenanceWindows). While none of
// a tenant's windows is open, disruptive work waits and the rest runs at
// once. Disruptive is: removing machines (a lower count, a node group that
// is gone, the tenant leaving git), any plan that destroys or replaces a
// resource, and the Talos plane's reboots, upgrades and configs that need
// a reboot.
//
// The check is the step "MaintenanceWindow", right after "Prepare": the
// applied model (what Prepare read) and the desired one are known there,
// and their difference names the machines a commit removes before any
// tofu runs. The step then swaps the run's desired state for one that
// keeps those machines, so that the same commit's additions and in-place
// changes apply now, and nothing is targeted (-target) by hand. What the
// model cannot tell, a replacement forced by a changed attribute, the
// plan tells: outside a window, a plan that destroys or replaces anything
// is not applied (windowCheck). The plane checks the window before each
// machine of a rollout (talos.Desired.Windows).
//
// Work that waits is a Retry for reason WaitingForMaintenanceWindow whose
// error is a *window.WaitError (windowWait), from this step, the plan check
// or the plane. The run then ends with the tenant's Reconciling condition
// at that reason and status.maintenance naming what waits and the next
// opening, not as a failure, and the full desired state is queued to run
// again at that opening, as a retry is (waitForWindow).

// windowState is what the MaintenanceWindow step found for a run.
type windowState struct {
	set window.Set
	// full is the desired state of the commit when the run applies one
	// that holds disruptive work back; nil when it holds nothing back.
	full *schema.TenantDesired
	// waits says what waits, one entry per kind of work.
	waits []string
}

// maintenanceWindow is the step that holds back disruptive work while the
// tenant's windows are closed (see above).
func (t *tenantRun) maintenanceWindow(context.Context) (stepResult, error) {
	spec := t.windowSpec()
	if spec == nil {
		return stepNext, nil
	}
	set, err := spec.MaintenanceWindowSet()
	if err != nil {
		return stepNext, stall(schema.ReasonInvalidManifests, err)
	}
	t.win.set = set

	now := t.r.opts.Now()
	if set.Open(now) {
		return stepNext, nil
	}
	if t.desired == nil {
		what := fmt.Sprintf("destruction of the tenant, which left git (%s)", machines(len(t.prev.Model.Machines)))
		return stepNext, windowWait(set.Wait(what, now))
	}
	held, waits, err := t.holdBack()
	if err != nil || len(waits) == 0 {
		return stepNext, retry(schema.ReasonStoreError, err)
	}
	t.win.full, t.win.waits = t.desired, waits
	t.desired, t.inHash, t.model = held, inputHash(held, t.r.opts.HashKey), modeldiff.DesiredModel(held.Redacted())
	t.generation = t.prev.Generation
	if t.prev.InputHash != t.inHash {
		t.generation++
	}
	return stepNext, nil
}

// windowSpec is the tenant spec whose windows apply to the run: the
// commit's, or for a tenant that left git the one last applied. Nil when
// nothing was applied yet: a new tenant has nothing to disrupt.
func (t *tenantRun) windowSpec() *schema.TenantSpec {
	switch {
	case t.prev == nil:
		return nil
	case t.desired != nil:
		return &t.desired.Tenant.Spec
	}
	return t.prev.Model.Tenant
}

// holdBack returns the run's desired state with the machines it would
// remove kept: a node group whose count went down keeps the count last
// applied, and one that is gone stays as last applied. waits says what
// was held back; empty when the desired state removes no machine.
func (t *tenantRun) holdBack() (held *schema.TenantDesired, waits []string, err error) {
	applied := t.prev.Model.NodeGroups
	out := *t.desired
	out.NodeGroups = nil
	for _, ng := range t.desired.NodeGroups {
		if was, ok := applied[ng.Metadata.Name]; ok && was.Count > ng.Spec.Count {
			kept := *ng
			kept.Spec.Count = was.Count
			ng = &kept
			waits = append(waits, fmt.Sprintf("scale-down of %s (%s)", ng.Metadata.Name, machines(was.Count-t.countOf(ng.Metadata.Name))))
		}
		out.NodeGroups = append(out.NodeGroups, ng)
	}
	var stored []*schema.NodeGroup
	err = t.r.store.View(func(tx store.Tx) (err error) {
		stored, err = store.DecodeTenantObjects[schema.NodeGroup](tx, t.name, schema.KindNodeGroup)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read node groups of %s: %w", t.name, err)
	}
	for _, ng := range stored {
		if _, ok := applied[ng.Metadata.Name]; !ok || t.desiredGroup(ng.Metadata.Name) {
			continue
		}
		kept := schema.NodeGroup{APIVersion: ng.APIVersion, Kind: ng.Kind, Metadata: ng.Metadata.Declared(), Spec: applied[ng.Metadata.Name]}
		out.NodeGroups = append(out.NodeGroups, &kept)
		waits = append(waits, fmt.Sprintf("removal of node group %s (%s)", ng.Metadata.Name, machines(kept.Spec.Count)))
	}
	slices.SortFunc(out.NodeGroups, func(a, b *schema.NodeGroup) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	return &out, waits, nil
}

// machines is "1 machine" or "N machines".
func machines(n int) string {
	if n == 1 {
		return "1 machine"
	}
	return fmt.Sprintf("%d machines", n)
}

// countOf is the count the commit gives node group name.
func (t *tenantRun) countOf(name string) int {
	for _, ng := range t.desired.NodeGroups {
		if ng.Metadata.Name == name {
			return ng.Spec.Count
		}
	}
	return 0
}

// desiredGroup reports whether the commit declares node group name.
func (t *tenantRun) desiredGroup(name string) bool {
	return slices.ContainsFunc(t.desired.NodeGroups, func(ng *schema.NodeGroup) bool { return ng.Metadata.Name == name })
}

// windowCheck wraps a plan check: while the tenant's windows are closed, a
// plan that destroys or replaces anything is not applied.
func (t *tenantRun) windowCheck(check tofu.Check) tofu.Check {
	return func(gone []tofu.PlannedChange) error {
		now := t.r.opts.Now()
		if err := check(gone); err != nil || len(gone) == 0 || t.win.set.Open(now) {
			return err
		}
		var replaced, destroyed []string
		for _, c := range gone {
			if len(c.Actions) == 2 {
				replaced = append(replaced, c.Address)
			} else {
				destroyed = append(destroyed, c.Address)
			}
		}
		var what []string
		if len(replaced) > 0 {
			what = append(what, fmt.Sprintf("replacement of %d resources (%s)", len(replaced), strings.Join(replaced, ", ")))
		}
		if len(destroyed) > 0 {
			what = append(what, fmt.Sprintf("destruction of %d resources (%s)", len(destroyed), strings.Join(destroyed, ", ")))
		}
		return windowWait(t.win.set.Wait(strings.Join(what, " and ")+", and the rest of the plan with it,", now))
	}
}

// windowWait is the step error of work that waits for a maintenance window:
// a Retry for reason WaitingForMaintenanceWindow, at w.Next.
func windowWait(w *window.WaitError) error {
	return &RetryError{Reason: schema.ReasonWaitingForMaintenanceWindow, Err: w}
}

// waitForWindow is the part of conclude that records waiting work: when
// the run held work back or a step's error is a wait (windowWait), the
// tenant's status says what waits and when the next window opens, and the
// commit's full desired state is queued for that opening. It returns the
// error conclude records: nil for waiting work, which is no failure.
func (t *tenantRun) waitForWindow(err error) error {
	r, now := t.r, t.r.opts.Now()
	wait := &window.WaitError{Next: t.win.set.NextOpen(now)}
	var stepWait *window.WaitError
	switch {
	case errors.As(err, &stepWait):
		t.win.waits = append(t.win.waits, stepWait.What)
		wait.Next = stepWait.Next
	case err != nil && t.win.full != nil:
		t.desired = t.win.full // a retry runs the commit as declared, and holds back again
		return err
	case err != nil || len(t.win.waits) == 0:
		return err
	}
	wait.What = strings.Join(t.win.waits, "; ")
	if wait.Next.IsZero() {
		return stall(schema.ReasonInvalidManifests, fmt.Errorf("%v, but none of the tenant's windows opens again: change spec.maintenanceWindows", wait))
	}
	msg := wait.Message()
	full := t.desired
	if t.win.full != nil {
		full = t.win.full
	}
	t.res.Waiting = msg
	werr := r.recordOutcome(t.name, t.desired, t.generation, func(schema.TenantStatus) status.Outcome {
		return status.Waiting(wait.What, msg, wait.Next, t.generation)
	})
	if werr != nil {
		r.log.Error("record tenant status", "tenant", t.name, "err", werr)
	}
	job := &tenantJob{run: t.job.run, tenant: t.name, desired: full, attempt: t.job.attempt + 1}
	if t.job.run.retryLater(job, wait.Next.Sub(now)) {
		t.res.NextAttemptAt = wait.Next
	}
	r.log.Info("disruptive work waits for a maintenance window", "tenant", t.name, "waits", msg, "next_window", wait.Next)
	return nil
}
