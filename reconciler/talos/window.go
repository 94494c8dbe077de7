package talos

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// A rollout respects the tenant's maintenance windows (Desired.Windows):
// before each machine it asks whether that machine's operation disrupts
// it, and while no window is open a disruptive one is not started. The
// rollout pauses there with a *window.WaitError and resumes with that
// machine when Roll is called in the next window; a machine already being
// worked on is always finished. Disruptive are upgrades, reboots, a config
// that Talos applies only with a reboot (asked with a dry run), and any
// config of a rollout that changes the Kubernetes version.

// windowClosed returns a *window.WaitError when next may not start now:
// the windows are closed and its operation is disruptive.
func (pl *Plane) windowClosed(ctx context.Context, d Desired, rec *RolloutRecord, todo []work) error {
	next := todo[0]
	now := pl.opts.Now()
	if d.Windows.Open(now) {
		return nil
	}
	disrupts, err := pl.disrupts(ctx, d, rec, next)
	if err != nil || !disrupts {
		return err
	}
	return d.Windows.Wait(waitingWork(next.m, next.op, len(todo)), now)
}

// waitingWork says what of a rollout waits for a window: the operation op
// of machine m and the left-1 machines after it.
func waitingWork(m Machine, op string, left int) string {
	what := map[string]string{OpApply: "config change", OpUpgrade: "Talos upgrade", OpReboot: "reboot"}[op]
	if what == "" {
		what = op
	}
	s := fmt.Sprintf("the rollout's %s of machine %s", what, m.label())
	if left > 1 {
		s += fmt.Sprintf(" and %d machines after it", left-1)
	}
	return s
}

// disrupts reports whether w's operation disrupts its machine.
func (pl *Plane) disrupts(ctx context.Context, d Desired, rec *RolloutRecord, w work) (bool, error) {
	if w.op != OpApply {
		return true, nil // upgrades and reboots restart the machine
	}
	if d.kubeUpgrade != nil || (rec.KubernetesVersion != "" && rec.KubernetesVersion != d.KubernetesVersion) {
		return true, nil // the new config restarts Kubernetes' components
	}
	var mode machine.ApplyConfigurationRequest_Mode
	err := pl.withClient(ctx, d.Tenant, d.Bundle, w.m, func(ctx context.Context, c *client.Client) error {
		resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{
			Data: d.Groups[w.m.NodeGroup].Config, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
		if err == nil && len(resp.GetMessages()) > 0 {
			mode = resp.GetMessages()[0].GetMode()
		}
		return err
	})
	if err != nil {
		return false, &WaitingError{Tenant: d.Tenant, Machine: w.m.label(),
			Reason: "a dry run of the config, to learn whether it needs a reboot, failed: " + strings.TrimSpace(err.Error())}
	}
	return mode != machine.ApplyConfigurationRequest_NO_REBOOT, nil
}
