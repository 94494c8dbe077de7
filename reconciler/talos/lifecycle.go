package talos

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// From Talos 1.13 a node installs an upgrade with LifecycleService.Upgrade
// (pull the installer image, install, no reboot) and no longer drains
// itself: the client drains its Node, reboots it into the new version and
// uncordons it, as talosctl upgrade does. A machine that runs an older
// Talos is drained and then upgraded with MachineService.Upgrade, which
// installs and reboots. The choice follows the version the machine runs,
// not the one it is upgraded to.
//
// An upgrade on this path goes through phases that the operation's record
// keeps (Operation.Phase), so that a server stopped between two of them
// goes on with the next: recorded (installing), installed, rebooted. An
// operation read back installed is drained (again: a drain that is done
// evicts nothing) and rebooted unless its machine shows that the reboot
// reached it; it is never installed again.

// Phases of an upgrade through LifecycleService.Upgrade.
const (
	PhaseInstalled = "installed" // the new version is installed; the machine runs the old one
	PhaseRebooted  = "rebooted"  // the machine acknowledged the reboot into the new version
)

// lifecycleSince is the first Talos version with LifecycleService.
var lifecycleSince = &config.VersionContract{Major: 1, Minor: 13}

// upgradesByLifecycle reports whether a machine that runs Talos version
// (as it reports it, "v1.14.0") is upgraded with LifecycleService.Upgrade.
func upgradesByLifecycle(version string) bool {
	v, err := config.ParseContractFromVersion(version)
	return err == nil && (v.Major > lifecycleSince.Major || v.Major == lifecycleSince.Major && v.Minor >= lifecycleSince.Minor)
}

// lifecycleWork reports whether w is an upgrade on the LifecycleService
// path.
func (w work) lifecycleWork() bool {
	return w.op == OpUpgrade && upgradesByLifecycle(w.obs.TalosVersion)
}

// install installs the current operation's version with
// LifecycleService.Upgrade and records the operation installed. An
// install that fails changes nothing: the operation is dropped, and the
// *WaitingError has the next Roll try again.
func (pl *Plane) install(ctx context.Context, d Desired, rec *RolloutRecord) error {
	op := rec.Current
	m := Machine{ID: op.Machine, Name: op.Name, Address: op.Address, NodeGroup: op.NodeGroup, ControlPlane: op.ControlPlane}
	image := pl.InstallerImage(op.ToVersion)
	pl.reportWaiting(rec, nil, fmt.Sprintf("the install of %s on %s", image, m.label()))
	// An install pulls an image and writes the disk: it may take as long
	// as an operation may.
	err := pl.withClientFor(ctx, pl.opts.Timeout, d.Tenant, d.Bundle, m, func(ctx context.Context, c *client.Client) error {
		return lifecycleUpgrade(ctx, c, image)
	})
	if err != nil {
		rec.Current = nil
		if serr := pl.save(KindRollout, d.Tenant, rec); serr != nil {
			return serr
		}
		return &WaitingError{Tenant: d.Tenant, Machine: m.label(), Reason: fmt.Sprintf("the install of Talos %s failed: %v", op.ToVersion, err)}
	}
	op.Phase, rec.UpdatedAt = PhaseInstalled, pl.opts.Now()
	pl.log.Info("installed", "tenant", d.Tenant, "machine", m.ID, "image", image)
	return pl.save(KindRollout, d.Tenant, rec)
}

// drainAndReboot drains the Node of the current operation's machine, once
// its new version is installed, and reboots it into that version.
func (pl *Plane) drainAndReboot(ctx context.Context, d Desired, rec *RolloutRecord, m Machine) error {
	op := rec.Current
	if op.Drain == nil {
		// The new version is installed: this drain runs to its end, as
		// the operation it belongs to has begun.
		d.Newer = nil
		dr, err := pl.drainBefore(ctx, d, rec, work{m: m, op: op.Op})
		if err != nil {
			pl.report(rec, nil)
			return err
		}
		op.Drain = dr
	}
	return pl.issue(ctx, d, rec)
}

// lifecycleUpgrade calls LifecycleService.Upgrade with image, as talosctl
// does, and reads its progress to the exit code: one that is not 0 is an
// error that quotes the last progress message.
func lifecycleUpgrade(ctx context.Context, c *client.Client, image string) error {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM},
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return err
	}
	last := ""
	for {
		resp, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("the install ended without an exit code")
		case err != nil:
			return err
		}
		switch p := resp.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			last = p.Message
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			if p.ExitCode != 0 {
				return fmt.Errorf("the installer exited with code %d: %s", p.ExitCode, last)
			}
			return nil
		}
	}
}
