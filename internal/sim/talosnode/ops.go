package talosnode

import (
	"context"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
)

// Bootstrap creates the etcd cluster on a running control plane, once per
// cluster: a node that is a member, or whose cluster already has members,
// refuses with Talos's "etcd data directory is not empty". The cluster's
// etcd starts empty, or with RecoverEtcd from the snapshot uploaded to
// the node (EtcdRecover); a single member, which the other control planes
// join.
func (a *machineAPI) Bootstrap(ctx context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	cluster := n.cluster()
	h.mu.Unlock()
	defer h.etcd.lock(cluster)()
	h.mu.Lock()
	e := a.begin(n, "Bootstrap")
	e.Recover = in.GetRecoverEtcd()
	err := h.bootstrapCheck(n)
	if err == nil && n.cluster() != cluster {
		err = status.Error(codes.FailedPrecondition, "bootstrap is not available yet: the node's config changed")
	}
	var ko *kubeapi.Options
	if err == nil && h.realEtcd(n) {
		o, kerr := h.kubeOptions(n)
		switch {
		case kerr == nil:
			ko = &o
		case in.GetRecoverEtcd():
			err = status.Errorf(codes.FailedPrecondition, "the cluster's Kubernetes API cannot run: %v", kerr)
		}
	}
	h.mu.Unlock()
	if err == nil {
		err = h.startEtcd(ctx, n, cluster, in.GetRecoverEtcd(), ko)
	}
	if err != nil {
		a.journal(n, e, err)
		return nil, err
	}
	h.mu.Lock()
	now := h.now()
	n.st.Etcd = etcdState{Member: true, JoinedAt: now, ID: memberID(n.st.ID, now), Bootstrapped: true}
	save := h.changed(n)
	h.notifyCluster(n)
	h.mu.Unlock()
	err = save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.kubeFor(n)
	h.mu.Unlock()
	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{Metadata: meta(n)}}}, nil
}

// bootstrapCheck is Bootstrap's validation. Called with h.mu held.
func (h *Host) bootstrapCheck(n *node) error {
	switch {
	case !n.running(h.now()):
		return status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	case !n.controlPlane():
		return status.Error(codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
	case n.st.Etcd.Member:
		return status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}
	if _, ok := h.bootstrappedSince(n.cluster(), n); ok {
		return status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}
	return nil
}

// Upgrade starts an upgrade to the version of an installer image (any
// registry; the tag names the version). A control plane checks etcd
// first, as Talos does without force: all members healthy, and not
// exactly two of them.
func (a *machineAPI) Upgrade(ctx context.Context, in *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "Upgrade")
	e.Image = in.GetImage()
	err := h.upgradeCheck(n, in)
	if err != nil {
		h.mu.Unlock()
		a.journal(n, e, err)
		return nil, err
	}
	n.st.UpgradeTo = versionOfImage(in.GetImage())
	n.start(h.now(), upgradeSteps(h.t, n.fault.NoUpgradeReturn))
	save := h.changed(n)
	h.mu.Unlock()
	err = save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Metadata: meta(n), Ack: "Upgrade request received", ActorId: actorID()}}}, nil
}

// upgradeCheck is Upgrade's validation. Called with h.mu held. Talos 1.18
// and later no longer have this call (LifecycleService.Upgrade replaces
// it).
func (h *Host) upgradeCheck(n *node, in *machine.UpgradeRequest) error {
	if runsAtLeast(n.st.Version, machineUpgradeEnd) {
		return status.Error(codes.Unimplemented, "method Upgrade not implemented: Talos 1.18 upgrades with LifecycleService.Upgrade")
	}
	if versionOfImage(in.GetImage()) == "" {
		return fmt.Errorf("error validating installer image %q: not a Talos installer image: its tag names no version", in.GetImage())
	}
	if !n.controlPlane() || in.GetForce() {
		return nil
	}
	members := h.members(n.cluster(), h.now())
	if len(members) == 0 {
		return errors.New("failed to create etcd client: no controlplane endpoints discovered yet")
	}
	if len(members) == 2 {
		return fmt.Errorf("error validating etcd for upgrade: etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(members))
	}
	for _, m := range members {
		if !m.healthy {
			return fmt.Errorf("error validating etcd for upgrade: etcd member %016x is not healthy; all members must be healthy to perform an upgrade: context deadline exceeded", m.n.st.Etcd.ID)
		}
	}
	return nil
}

// Rollback reboots into the previous version. After a boot loader
// fallback the previous version already runs: the node reboots and keeps
// it.
func (a *machineAPI) Rollback(ctx context.Context, _ *machine.RollbackRequest) (*machine.RollbackResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "Rollback")
	if n.st.PreviousVersion == "" && !n.st.FellBack {
		h.mu.Unlock()
		err := errors.New("cannot rollback: no previous Talos version on the boot disk")
		a.journal(n, e, err)
		return nil, err
	}
	n.start(h.now(), rebootSteps(h.t, effectActivate, effectRollback))
	save := h.changed(n)
	h.mu.Unlock()
	err := save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.RollbackResponse{Messages: []*machine.Rollback{{Metadata: meta(n)}}}, nil
}

// Reboot reboots the node; a staged config becomes the running one, and
// a version that LifecycleService.Upgrade installed boots.
func (a *machineAPI) Reboot(ctx context.Context, _ *machine.RebootRequest) (*machine.RebootResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "Reboot")
	if n.st.UpgradeTo != "" {
		n.start(h.now(), switchSteps(h.t, n.fault.NoUpgradeReturn))
	} else {
		n.start(h.now(), rebootSteps(h.t, effectActivate))
	}
	save := h.changed(n)
	h.mu.Unlock()
	err := save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.RebootResponse{Messages: []*machine.Reboot{{Metadata: meta(n), ActorId: actorID()}}}, nil
}

// Reset wipes the node: a graceful reset of a control plane leaves etcd
// first. With reboot the machine comes back without its config (a metal
// machine in maintenance mode; a cloud machine acquires its user data
// again); without, it powers off, and StartMaintenance powers a metal
// machine on again. A reset whose system partitions to wipe are only
// EPHEMERAL keeps the config (on STATE): the node loses its etcd data and
// membership, and an etcd snapshot uploaded for recovery, and comes back
// running its config.
func (a *machineAPI) Reset(ctx context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "Reset")
	e.Graceful, e.Reboot = in.GetGraceful(), in.GetReboot()
	wipe, err := resetWipe(in, &e)
	if err != nil {
		h.mu.Unlock()
		a.journal(n, e, err)
		return nil, err
	}
	steps := resetSteps(h.t, in.GetGraceful(), wipe)
	if !in.GetReboot() {
		steps = steps[:len(steps)-1] // no boot
		for i := 1; i < len(steps); i++ {
			steps[i].Stage = runtime.MachineStageShuttingDown
		}
		steps[len(steps)-1].Effects = append(steps[len(steps)-1].Effects, effectPowerOff)
	}
	n.start(h.now(), steps)
	save := h.changed(n)
	h.mu.Unlock()
	err = save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.ResetResponse{Messages: []*machine.Reset{{Metadata: meta(n), ActorId: actorID()}}}, nil
}

// resetWipe is what a reset wipes: everything (effectWipe), or with only
// EPHEMERAL among the system partitions to wipe, the node's data but not
// its config (effectWipeData). It notes the labels in e.
func resetWipe(in *machine.ResetRequest, e *JournalEntry) (string, error) {
	if len(in.GetUserDisksToWipe()) > 0 && in.GetMode() == machine.ResetRequest_SYSTEM_DISK {
		return "", errors.New("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
	}
	wipe := effectWipe
	if len(in.GetSystemPartitionsToWipe()) > 0 {
		wipe = effectWipeData
	}
	for _, p := range in.GetSystemPartitionsToWipe() {
		switch p.GetLabel() {
		case constants.EphemeralPartitionLabel:
		case constants.StatePartitionLabel:
			wipe = effectWipe // the config goes: the node is wiped as a whole
		default:
			return "", status.Errorf(codes.InvalidArgument, "reset failed: invalid input, partition %q cannot be wiped: the system partitions to wipe are %s and %s",
				p.GetLabel(), constants.StatePartitionLabel, constants.EphemeralPartitionLabel)
		}
		e.Wipe = append(e.Wipe, p.GetLabel())
	}
	return wipe, nil
}
