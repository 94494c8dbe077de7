package talosnode

import (
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The Talos versions that change how a node is upgraded: from 1.13 the
// LifecycleService installs a new version without rebooting, and from 1.18
// MachineService.Upgrade, which installs and reboots, is gone.
var (
	lifecycleSince    = &config.VersionContract{Major: 1, Minor: 13}
	machineUpgradeEnd = &config.VersionContract{Major: 1, Minor: 18}
)

// runsAtLeast reports whether Talos version (such as "v1.14.1") is since
// or later; a version that does not parse is not.
func runsAtLeast(version string, since *config.VersionContract) bool {
	v, err := config.ParseContractFromVersion(version)
	return err == nil && (v.Major > since.Major || v.Major == since.Major && v.Minor >= since.Minor)
}

// lifecycleAPI is the LifecycleService of every node of a host. A node
// older than Talos 1.13 answers it as such a node does: the service is
// unknown there.
type lifecycleAPI struct {
	machine.UnimplementedLifecycleServiceServer
	a *machineAPI
}

// Upgrade pulls the installer image and installs its version, streaming
// the progress and an exit code, and does not reboot: the node runs on,
// and its next reboot boots the new version.
func (l *lifecycleAPI) Upgrade(in *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	a := l.a
	h, n := a.h, callOf(srv.Context()).n
	image := in.GetSource().GetImageName()
	h.mu.Lock()
	e := a.begin(n, "LifecycleService.Upgrade")
	e.Image = image
	err := lifecycleCheck(n, image)
	h.mu.Unlock()
	if err != nil {
		a.journal(n, e, err)
		return err
	}
	for _, msg := range []string{"pulling " + image, "installing Talos " + versionOfImage(image)} {
		if err := srv.Send(progress(msg)); err != nil {
			a.journal(n, e, err)
			return err
		}
	}
	h.mu.Lock()
	n.st.UpgradeTo = versionOfImage(image)
	save := h.changed(n)
	h.mu.Unlock()
	err = save()
	a.journal(n, e, err)
	if err != nil {
		return err
	}
	return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: 0},
	}})
}

func progress(msg string) *machine.LifecycleServiceUpgradeResponse {
	return &machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_Message{Message: msg},
	}}
}

// lifecycleCheck is LifecycleService.Upgrade's validation. Called with
// h.mu held.
func lifecycleCheck(n *node, image string) error {
	if !runsAtLeast(n.st.Version, lifecycleSince) {
		return status.Error(codes.Unimplemented, "unknown service machine.LifecycleService")
	}
	if versionOfImage(image) == "" {
		return status.Errorf(codes.InvalidArgument, "error validating installer image %q: not a Talos installer image: its tag names no version", image)
	}
	return nil
}
