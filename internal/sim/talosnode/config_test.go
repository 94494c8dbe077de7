package talosnode

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
)

// runningConfig reads the node's running config over COSI and returns it
// with its SHA-256.
func runningConfig(t *testing.T, ctx context.Context, c *client.Client) ([]byte, string) {
	t.Helper()
	mc, err := safe.StateGet[*config.MachineConfig](ctx, c.COSI, config.NewMachineConfig(nil).Metadata())
	if err != nil {
		t.Fatal(err)
	}
	b, err := mc.Provider().Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b, hashHex(b)
}

const labelPatch = "machine:\n  nodeLabels:\n    rezuscloud.io/patched: \"yes\"\n"

// envPatch changes machine.env, which needs a reboot.
const envPatch = "machine:\n  env:\n    HTTP_PROXY: http://127.0.0.1:3128\n"

func TestApplyModesAndTheRunningConfig(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 7)
	base := machineConfig(t, secrets, "controlplane", false)
	if err := h.Boot("vm-c", a, base); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if _, sum := runningConfig(t, ctx, c); sum != hashHex(base) {
		t.Fatalf("running config hash %s, want the user data's %s", sum, hashHex(base))
	}
	if _, err := safe.StateGet[*config.MachineConfig](ctx, readerClient(t, secrets, a).COSI, config.NewMachineConfig(nil).Metadata()); err == nil || !strings.Contains(err.Error(), "not authorized") {
		t.Fatalf("a reader read the config: %v", err)
	}

	// dry run: a diff, nothing changes
	labels := machineConfig(t, secrets, "controlplane", false, labelPatch)
	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: labels, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	if err != nil || !strings.Contains(resp.Messages[0].ModeDetails, "Config diff:") || !strings.Contains(resp.Messages[0].ModeDetails, "rezuscloud.io/patched") {
		t.Fatalf("dry run: %v %v", resp, err)
	}
	if _, sum := runningConfig(t, ctx, c); sum != hashHex(base) {
		t.Fatal("dry run changed the config")
	}

	// auto with a live change: no reboot
	resp, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: labels, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil || resp.Messages[0].Mode != machine.ApplyConfigurationRequest_NO_REBOOT || resp.Messages[0].ModeDetails != "Applied configuration without a reboot" {
		t.Fatalf("auto, live change: %v %v", resp, err)
	}
	if _, sum := runningConfig(t, ctx, c); sum != hashHex(labels) {
		t.Fatal("no-reboot apply did not change the running config")
	}
	if info, _ := h.Node(a); info.Stage != runtime.MachineStageRunning {
		t.Fatalf("stage after a live change: %s", info.Stage)
	}

	// no-reboot refuses a change that needs one
	env := machineConfig(t, secrets, "controlplane", false, envPatch)
	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: env, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	wantCode(t, "no-reboot of machine.env", err, codes.InvalidArgument, "this config change can't be applied in immediate mode")

	// staged: the running config stays until a reboot
	resp, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: env, Mode: machine.ApplyConfigurationRequest_STAGED})
	if err != nil || resp.Messages[0].ModeDetails != "Staged configuration to be applied after the next reboot" {
		t.Fatalf("staged: %v %v", resp, err)
	}
	if info, _ := h.Node(a); info.ConfigSHA256 != hashHex(labels) || info.StagedSHA256 != hashHex(env) {
		t.Fatalf("after staged apply: %+v", info)
	}
	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "staged config active after reboot", func() bool {
		info, _ := h.Node(a)
		return info.ConfigSHA256 == hashHex(env) && info.StagedSHA256 == "" && info.Stage == runtime.MachineStageRunning
	})

	// auto with a change that needs a reboot reboots
	resp, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: base, Mode: machine.ApplyConfigurationRequest_AUTO})
	if err != nil || resp.Messages[0].Mode != machine.ApplyConfigurationRequest_REBOOT || !strings.HasPrefix(resp.Messages[0].ModeDetails, "Applied configuration with a reboot: this config change can't be applied in immediate mode") {
		t.Fatalf("auto, change needing a reboot: %v %v", resp, err)
	}
	if info, _ := h.Node(a); info.Stage != runtime.MachineStageRebooting {
		t.Fatalf("stage: %s", info.Stage)
	}
	info := waitRunning(t, h, a)
	if info.ConfigSHA256 != hashHex(base) {
		t.Fatal("the config applied with a reboot is not running after it")
	}
}

func TestTryModeReverts(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 8)
	base := machineConfig(t, secrets, "controlplane", false)
	if err := h.Boot("vm-t", a, base); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	labels := machineConfig(t, secrets, "controlplane", false, labelPatch)
	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: labels, Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(300 * time.Millisecond)})
	if err != nil || !strings.Contains(resp.Messages[0].ModeDetails, "will be automatically reverted back in 300ms") {
		t.Fatalf("try: %v %v", resp, err)
	}
	if _, sum := runningConfig(t, ctx, c); sum != hashHex(labels) {
		t.Fatal("try did not apply")
	}
	eventually(t, "revert", func() bool { _, sum := runningConfig(t, ctx, c); return sum == hashHex(base) })
}

func TestLogsFollow(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 9)
	if err := h.Boot("vm-l", a, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c := adminClient(t, secrets, a)
	stream, err := c.Logs(ctx, "system", 0, "machined", true, -1)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		for {
			d, err := stream.Recv()
			if err != nil {
				return
			}
			sc := bufio.NewScanner(bytes.NewReader(d.Bytes))
			for sc.Scan() {
				lines <- sc.Text()
			}
		}
	}()
	want := func(what string) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, what) {
					return
				}
			case <-timeout:
				t.Fatalf("no log line with %q", what)
			}
		}
	}
	want("machine is running and ready")
	want("controller runtime: reconciled") // followed: new lines keep coming
	// A write call shows up in the followed log.
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: machineConfig(t, secrets, "controlplane", false, labelPatch), Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}
	want("apply config request: mode auto(no_reboot)")

	// Dmesg without follow ends; the kernel log names the platform.
	ds, err := c.Dmesg(ctx, false, false)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ds.Recv()
	if err != nil || !strings.Contains(string(d.Bytes), "talos.platform=nocloud") || !strings.HasPrefix(string(d.Bytes), "kern:    info: [") {
		t.Fatalf("dmesg: %q %v", d.GetBytes(), err)
	}
	if _, err := c.Logs(ctx, "system", 0, "nonsense", false, 10); err == nil {
		// the error comes with the first message
		s, _ := c.Logs(ctx, "system", 0, "nonsense", false, 10)
		if _, err := s.Recv(); err == nil || !strings.Contains(err.Error(), `log "nonsense" was not registered`) {
			t.Fatalf("unknown service: %v", err)
		}
	}
}
