package talosnode

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// TestLogsInTimeOrder: a service's log lists its lines in the order they
// happened, as a node's own log does. A config applied to a running node
// comes after the lines of its boot, not between them.
func TestLogsInTimeOrder(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	a := addr(h, 10)
	if err := h.Boot("vm-o", a, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, a)
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: machineConfig(t, secrets, "controlplane", false, labelPatch), Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.Logs(ctx, "system", 0, "machined", false, -1)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for {
		d, err := stream.Recv()
		if err != nil {
			break
		}
		text.Write(d.GetBytes())
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	var last time.Time
	for i, l := range lines {
		at, err := time.Parse("2006/01/02 15:04:05.000000", l[:min(len(l), 26)])
		if err != nil {
			t.Fatalf("line %d has no time: %q", i+1, l)
		}
		if at.Before(last) {
			t.Errorf("line %d is older than the one before it:\n%s", i+1, text.String())
		}
		last = at
	}
	if n := len(lines); n < 2 || !strings.Contains(lines[n-1], "apply config request") {
		t.Errorf("the last line is not the config applied last:\n%s", text.String())
	}
}
