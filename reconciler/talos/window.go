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
// rollout pauses there with a *WindowError and resumes with that machine
// when Roll is called in the next window; a machine already being worked
// on is always finished. Disruptive are upgrades, reboots, a config that
// Talos applies only with a reboot (asked with a dry run), and any config
// of a rollout that changes the Kubernetes version.

// WindowError says that a rollout paused before a machine whose operation
// is disruptive, because none of the tenant's maintenance windows is open.
type WindowError struct {
	Tenant  string
	Machine string
	Op      string
	// Left is how many machines of the rollout wait, this one included.
	Left int
}

// What says what waits, for a status message.
func (e *WindowError) What() string {
	what := map[string]string{OpApply: "config change", OpUpgrade: "Talos upgrade", OpReboot: "reboot"}[e.Op]
	if what == "" {
		what = e.Op
	}
	s := fmt.Sprintf("the rollout's %s of machine %s", what, e.Machine)
	if e.Left > 1 {
		s += fmt.Sprintf(" and %d machines after it", e.Left-1)
	}
	return s
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("tenant %s: %s waits for a maintenance window", e.Tenant, e.What())
}

// windowClosed returns a *WindowError when next may not start now: the
// windows are closed and its operation is disruptive.
func (pl *Plane) windowClosed(ctx context.Context, d Desired, rec *RolloutRecord, todo []work) error {
	next := todo[0]
	if d.Windows.Open(pl.opts.Now()) {
		return nil
	}
	disrupts, err := pl.disrupts(ctx, d, rec, next)
	if err != nil || !disrupts {
		return err
	}
	return &WindowError{Tenant: d.Tenant, Machine: next.m.label(), Op: next.op, Left: len(todo)}
}

// disrupts reports whether w's operation disrupts its machine.
func (pl *Plane) disrupts(ctx context.Context, d Desired, rec *RolloutRecord, w work) (bool, error) {
	if w.op != OpApply {
		return true, nil // upgrades and reboots restart the machine
	}
	if rec.KubernetesVersion != "" && rec.KubernetesVersion != d.KubernetesVersion {
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
