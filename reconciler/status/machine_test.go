package status

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestNodeVerdict: a machine that Talos shows ready is not ready once the
// tenant's Kubernetes API has shown its Node NotReady for longer than
// NodeNotReadyGrace, with the Node's reason, and is not counted ready; a
// shorter spell, a Ready Node or no Node at all change nothing.
func TestNodeVerdict(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	probe := Probe{At: now, Connected: true, Stage: schema.StageReady, Ready: true}
	node := func(ready bool, since time.Duration) *schema.MachineKubernetes {
		status := "False"
		if ready {
			status = "True"
		}
		return &schema.MachineKubernetes{NodeName: "prod-w-1", Ready: ready, Schedulable: true, Conditions: []schema.NodeCondition{
			{Type: "Ready", Status: status, Reason: "KubeletNotReady", Message: "PLEG is not healthy", LastTransitionTime: now.Add(-since)}}}
	}
	for _, c := range []struct {
		name    string
		node    *schema.MachineKubernetes
		ready   bool
		message string
	}{
		{"no Node", nil, true, ""},
		{"Node Ready", node(true, time.Hour), true, ""},
		{"NotReady for a minute", node(false, time.Minute), true, ""},
		{"NotReady for three minutes", node(false, 3*time.Minute), false, "Node prod-w-1 NotReady since 2026-12-05T11:57:00Z: KubeletNotReady: PLEG is not healthy"},
	} {
		st := Machine(schema.MachineStatus{Kubernetes: c.node}, probe)
		if st.Ready != c.ready || st.Message != c.message {
			t.Errorf("%s: ready %v, message %q; want %v, %q", c.name, st.Ready, st.Message, c.ready, c.message)
		}
		var counts schema.MachineCounts
		count(&counts, &schema.Machine{Status: st})
		if want := map[bool]int{true: 1, false: 0}[c.ready]; counts.Ready != want {
			t.Errorf("%s: counted %d ready, want %d", c.name, counts.Ready, want)
		}
	}
}

// TestMachineKeepsTheInventory: a probe with inventory replaces the
// stored one; a probe without it (not read, or the machine did not
// answer) keeps the last one read; maintenance follows the probe.
func TestMachineKeepsTheInventory(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	hw := &schema.MachineHardware{CPUs: 4, MemoryMiB: 8192}
	net := &schema.MachineNetwork{Hostname: "w-0", Addresses: []string{"127.1.0.10/8"}}
	sch := &schema.MachineSchematic{ID: "abc"}
	s := Machine(schema.MachineStatus{}, Probe{At: at, Connected: true, Stage: schema.StageReady, Ready: true, Hardware: hw, Network: net, Schematic: sch})
	if s.Hardware != hw || s.Network != net || s.Schematic != sch || s.Maintenance {
		t.Fatalf("first probe: %+v", s)
	}
	s = Machine(s, Probe{At: at.Add(time.Minute), Connected: true, Stage: schema.StageReady, Ready: true})
	if s.Hardware != hw || s.Network != net || s.Schematic != sch {
		t.Fatalf("a probe that read no inventory: %+v", s)
	}
	s = Machine(s, Probe{At: at.Add(2 * time.Minute), Error: "Version: EOF"})
	if s.Hardware != hw || s.Connected {
		t.Fatalf("a machine that did not answer: %+v", s)
	}
	hw2 := &schema.MachineHardware{CPUs: 8, MemoryMiB: 8192}
	s = Machine(s, Probe{At: at.Add(3 * time.Minute), Stage: schema.StageMaintenance, Maintenance: true, Hardware: hw2})
	if s.Hardware != hw2 || !s.Maintenance || s.Stage != schema.StageMaintenance {
		t.Fatalf("a machine in maintenance mode: %+v", s)
	}
}
