package talosnode

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lifecycleUpgrade calls LifecycleService.Upgrade as talosctl upgrade does
// from Talos 1.13 on, and returns the progress messages and the exit code.
func lifecycleUpgrade(ctx context.Context, c *client.Client, image string) ([]string, int32, error) {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM},
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return nil, -1, err
	}
	var msgs []string
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, -1, errors.New("the stream ended without an exit code")
		}
		if err != nil {
			return msgs, -1, err
		}
		switch p := resp.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			msgs = append(msgs, p.Message)
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			return msgs, p.ExitCode, nil
		}
	}
}

// calls lists the journal's calls that the node took, with their image.
func calls(t *testing.T, h *Host, key string) []string {
	t.Helper()
	j, err := h.Journal(key)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range j {
		if e.Error == "" {
			out = append(out, strings.TrimSpace(e.Call+" "+e.Image))
		}
	}
	return out
}

// A node that runs Talos 1.13 or later installs with
// LifecycleService.Upgrade and keeps running its version until a Reboot
// boots the new one.
func TestLifecycleUpgradeThenReboot(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 6)
	if err := h.BootMachine(Machine{ID: "vm-l", Address: a, Version: "v1.14.0", UserData: machineConfig(t, secrets, "controlplane", false)}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if _, _, err := lifecycleUpgrade(ctx, c, "ghcr.io/siderolabs/installer:latest"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("install of an image without version: %v", err)
	}
	image := "127.0.0.1:5000/siderolabs/installer:v1.14.1"
	msgs, code, err := lifecycleUpgrade(ctx, c, image)
	if err != nil || code != 0 || len(msgs) != 2 || !strings.HasPrefix(msgs[0], "pulling ") || !strings.HasPrefix(msgs[1], "installing ") {
		t.Fatalf("install: %q, exit code %d, %v", msgs, code, err)
	}
	info, _ := h.Node(a)
	if info.Stage != runtime.MachineStageRunning || info.Version != "v1.14.0" {
		t.Fatalf("after the install: stage %s, version %s; want running v1.14.0", info.Stage, info.Version)
	}
	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "new version", func() bool {
		v, err := c.Version(ctx)
		return err == nil && v.Messages[0].Version.Tag == "v1.14.1"
	})
	if info := waitRunning(t, h, a); info.PreviousVersion != "v1.14.0" {
		t.Fatalf("previous version %q", info.PreviousVersion)
	}
	if got, want := calls(t, h, a), []string{"LifecycleService.Upgrade " + image, "Reboot"}; !slices.Equal(got, want) {
		t.Fatalf("journal: %q, want %q", got, want)
	}
}

// Each node refuses the upgrade call its version does not serve, as
// Talos does, and journals the refusal: a node older than 1.13 has no
// LifecycleService, and Talos 1.18 has no MachineService.Upgrade.
func TestUpgradeRefusedByVersion(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	image := "127.0.0.1:5000/siderolabs/installer:v1.18.1"
	// The workers' trustd.
	if err := h.Boot("vm-v-cp", addr(h, 250), machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		version   string
		lifecycle codes.Code
		machine   bool
	}{
		{"v1.12.6", codes.Unimplemented, true},
		{"v1.18.0", codes.OK, false},
	} {
		a := addr(h, 7+i)
		id := "vm-v" + string(rune('a'+i))
		if err := h.BootMachine(Machine{ID: id, Address: a, Version: tc.version, UserData: machineConfig(t, secrets, "worker", false)}); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, h, a)
		ctx := ctxT(t)
		c := adminClient(t, secrets, a)
		_, _, err := lifecycleUpgrade(ctx, c, image)
		if status.Code(err) != tc.lifecycle {
			t.Errorf("%s: LifecycleService.Upgrade: %v, want %s", tc.version, err, tc.lifecycle)
		}
		_, err = c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image))
		if tc.machine != (err == nil) || !tc.machine && status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: MachineService.Upgrade: %v", tc.version, err)
		}
		j, _ := h.Journal(a)
		if len(j) != 2 || (j[0].Error == "") != (tc.lifecycle == codes.OK) || (j[1].Error == "") != tc.machine {
			t.Errorf("%s: journal %+v", tc.version, j)
		}
	}
}
