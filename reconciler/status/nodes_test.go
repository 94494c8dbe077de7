package status

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestNodesOf: a machine's Node is the one named after its host name; a
// machine without a host name of its own (Talos makes one up, talos-…)
// has the Node at its management address, with or without a port.
func TestNodesOf(t *testing.T) {
	ns := Nodes{
		ByName: map[string]schema.MachineKubernetes{
			"lab-cp-1": {NodeName: "lab-cp-1"}, "talos-596-78a": {NodeName: "talos-596-78a"},
		},
		ByAddress: map[string]string{"127.70.9.1": "lab-cp-1", "127.70.9.3": "talos-596-78a"},
	}
	for _, c := range []struct {
		hostname, address, want string
	}{
		{"lab-cp-1", "127.70.9.1", "lab-cp-1"},
		{"", "127.70.9.3", "talos-596-78a"},
		{"", "127.70.9.3:50000", "talos-596-78a"},
		{"lab-cp-9", "127.70.9.3", ""}, // a host name of its own: no Node of that name
		{"", "127.70.9.9", ""},
		{"", "", ""},
	} {
		m := &schema.Machine{Spec: schema.MachineSpec{Hostname: c.hostname, ManagementAddress: c.address}}
		n, ok := ns.of(m)
		if got := n.NodeName; ok != (c.want != "") || got != c.want {
			t.Errorf("machine %q at %q: Node %q (%v), want %q", c.hostname, c.address, got, ok, c.want)
		}
	}
}
