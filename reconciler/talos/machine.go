package talos

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Machine is one machine of a tenant as the plane addresses it.
type Machine struct {
	// ID is the machine's key in the store (its provider id).
	ID string
	// Name orders machines of a node group and names them in messages,
	// such as the TF address "rezussim_machine.ng_cp[2]" or a host name.
	Name string
	// Address is where its Talos API listens (port 50000 unless given).
	Address      string
	NodeGroup    string
	ControlPlane bool
	// Node is the name of its Kubernetes Node, once the plane has seen
	// it in the tenant's API (status.kubernetes); empty before, and then
	// it is not drained.
	Node string
}

// MachineOf returns the stored machine m as the plane addresses it, and
// whether the plane works on it at all: not when it has no management
// address (no Talos API to reach) or is being deleted. The reconciler's
// runs and the observer take their machines from it alike.
func MachineOf(m *schema.Machine) (Machine, bool) {
	if m.Spec.ManagementAddress == "" || m.Metadata.DeletionTimestamp != nil {
		return Machine{}, false
	}
	pm := Machine{
		ID: m.Metadata.Name, Name: m.Spec.TFAddress, Address: m.Spec.ManagementAddress,
		NodeGroup: m.Spec.NodeGroup, ControlPlane: m.Spec.Role == schema.RoleControlPlane,
	}
	if k := m.Status.Kubernetes; k != nil {
		pm.Node = k.NodeName
	}
	return pm, true
}

// MachinesOf returns those of ms that the plane works on (MachineOf), in
// their order.
func MachinesOf(ms []*schema.Machine) []Machine {
	var out []Machine
	for _, m := range ms {
		if pm, ok := MachineOf(m); ok {
			out = append(out, pm)
		}
	}
	return out
}

// label is how messages name the machine.
func (m Machine) label() string {
	if m.Name != "" && m.Name != m.ID {
		return m.Name + " (" + m.ID + ")"
	}
	return m.ID
}

// Order sorts machines in the plane's stable order: control planes first,
// then by node group, by name (numbers inside names compare as numbers, so
// that [2] comes before [10]) and by id. The first control plane of this
// order is the one bootstrapped; rollouts go through machines in it.
func Order(ms []Machine) {
	slices.SortStableFunc(ms, func(a, b Machine) int {
		if a.ControlPlane != b.ControlPlane {
			if a.ControlPlane {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.NodeGroup, b.NodeGroup); c != 0 {
			return c
		}
		if c := naturalCompare(a.Name, b.Name); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// naturalCompare compares strings with runs of digits compared by value.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := cmp.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// controlPlanes returns the control planes of ms, in order.
func controlPlanes(ms []Machine) []Machine {
	out := slices.Clone(ms)
	Order(out)
	return slices.DeleteFunc(out, func(m Machine) bool { return !m.ControlPlane })
}
