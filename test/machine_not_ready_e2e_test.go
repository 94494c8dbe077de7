package test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestMachineNotReadyE2E: a staging worker that stops answering its
// Talos API for longer than machineNotReadyAfter (2 s here) is told of
// once, to the webhook, naming the machine and why; when it answers
// again, nothing more is sent.
func TestMachineNotReadyE2E(t *testing.T) {
	rcv := newNotifyReceiver(t)
	cfg := rcv.config(t.TempDir())
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append([]byte("machineNotReadyAfter: 2s\n"), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newE2E(t, e2eOptions{args: planeArgs("--notifications", cfg)})
	planeWaitReady(t, e, "staging")
	var worker *schema.Machine
	for _, m := range e.srv.tenantMachines("staging") {
		if m.Spec.Role != schema.RoleControlPlane {
			worker = &m
		}
	}
	if worker == nil {
		t.Fatal("staging has no worker")
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{worker.Metadata.Name: {Refuse: true}}); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	got := rcv.waitHook(e, notify.MachineNotReady, "staging")
	t.Logf("MachineNotReady %s after the worker stopped answering", time.Since(down).Round(time.Millisecond))
	if got.Severity != notify.SeverityError || (got.Machine != worker.Spec.Hostname && got.Machine != worker.Metadata.Name && got.Machine != worker.Spec.TFAddress) ||
		!strings.Contains(got.Message, "has not been ready for") {
		t.Errorf("MachineNotReady: %+v, want an error naming %s", got, worker.Metadata.Name)
	}
	if err := talosnode.WriteFaults(e.data+"-sim", talosnode.Faults{}); err != nil {
		t.Fatal(err)
	}
	e.srv.WaitFor("the worker to be ready again", func() bool {
		for _, m := range e.srv.tenantMachines("staging") {
			if m.Metadata.Name == worker.Metadata.Name {
				return m.Status.Ready && m.Status.Connected
			}
		}
		return false
	})
	time.Sleep(3 * time.Second) // longer than the threshold: a second message would have come
	if n := len(rcv.hooked(notify.MachineNotReady, "staging")); n != 1 {
		t.Errorf("%d MachineNotReady of staging, want 1: %+v", n, rcv.hooked(notify.MachineNotReady, "staging"))
	}
}
