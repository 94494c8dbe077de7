package status

import (
	"errors"
	"fmt"
	"net"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// MachineObserved records what a probe of the machine stored as key
// found: its status becomes Machine of the stored one and p, written only
// when the observed facts change (SameMachine). A machine gone meanwhile
// is left alone. It reports whether the status changes.
func (r Recorder) MachineObserved(key string, p Probe) (changed bool, err error) {
	var m schema.Machine
	err = r.tx.GetObject(schema.KindMachine, key, &m)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st := Machine(m.Status, p)
	if SameMachine(m.Status, st) {
		return false, nil
	}
	if r.check {
		return true, nil
	}
	if err := r.machineHistory(m.Spec.Tenant, key, m.Status, st); err != nil {
		return false, err
	}
	m.Status = st
	schema.SetHardwareLabels(&m.Metadata, st.Hardware)
	return true, r.put(schema.KindMachine, key, &m)
}

// Observation is what the Talos plane observes of a tenant beside its
// machines' status.
type Observation struct {
	// APIAnswers: a control plane runs kube-apiserver.
	APIAnswers bool
	// Rollout is where the tenant's rollout stands; the zero Rollout when
	// it has none.
	Rollout Rollout
}

// TenantObserved records what the plane observes of tenant name: the
// status of the tenant and of its node groups is computed anew (Compute)
// from it and the machines as stored, with the Upgrading condition and
// status.rollout of o's rollout, and each that differs from the stored one
// is written. A tenant not recorded yet, or gone, is left alone. It
// reports whether anything changes.
func (r Recorder) TenantObserved(name string, o Observation) (changed bool, err error) {
	var t schema.Tenant
	if err := r.tx.GetObject(schema.KindTenant, name, &t); err != nil {
		return false, nil
	}
	ngs, machines, err := storedParts(r.tx, name)
	if err != nil {
		return false, fmt.Errorf("tenant %s: %w", name, err)
	}
	st := Compute(Tenant{Status: t.Status, Generation: t.Metadata.Generation, NodeGroups: ngs,
		Machines: machines, APIAnswers: o.APIAnswers}, r.now)
	st.Tenant.Conditions = st.Tenant.Conditions.Set(Upgrading(o.Rollout, ""), r.now)
	st.Tenant.Rollout = o.Rollout.Status(machines)
	if !sameJSON(st.Tenant, t.Status) {
		changed = true
		if err := r.tenantHistory(name, t.Status, st.Tenant); err != nil {
			return false, err
		}
		t.Status = st.Tenant
		if err := r.putObserved(schema.KindTenant, name, &t); err != nil {
			return false, err
		}
	}
	for _, ng := range ngs {
		gs := st.NodeGroups[ng.Metadata.Name]
		gs.Conditions = gs.Conditions.Set(Upgrading(o.Rollout, ng.Metadata.Name), r.now)
		if sameJSON(gs, ng.Status) {
			continue
		}
		changed = true
		ng.Status = gs
		if err := r.putObserved(schema.KindNodeGroup, nodeGroupKey(name, ng.Metadata.Name), ng); err != nil {
			return false, err
		}
	}
	return changed, nil
}

// putObserved stores obj unless the recorder only checks.
func (r Recorder) putObserved(kind, key string, obj schema.Object) error {
	if r.check {
		return nil
	}
	return r.put(kind, key, obj)
}

// Nodes are a tenant's Nodes as its Kubernetes API listed them.
type Nodes struct {
	ByName map[string]schema.MachineKubernetes
	// ByAddress names the Node whose kubelet reports each InternalIP.
	ByAddress map[string]string
}

// of is the Node of machine m: the one named after its host name, else,
// for a machine with no host name of its own (Talos then makes one up),
// the one at its management address.
func (ns Nodes) of(m *schema.Machine) (schema.MachineKubernetes, bool) {
	if m.Spec.Hostname != "" {
		n, ok := ns.ByName[m.Spec.Hostname]
		return n, ok
	}
	addr := m.Spec.ManagementAddress
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	n, ok := ns.ByName[ns.ByAddress[addr]]
	return n, ok && addr != ""
}

// KubernetesObserved records the tenant's Nodes on the machines they run
// on (Nodes.of); a machine with no Node loses its Kubernetes status. Only
// machines whose status changes are written. It reports whether anything
// changes.
func (r Recorder) KubernetesObserved(tenant string, nodes Nodes) (changed bool, err error) {
	machines, err := store.DecodeTenantObjects[schema.Machine](r.tx, tenant, schema.KindMachine)
	if err != nil {
		return false, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	for _, m := range machines {
		var k *schema.MachineKubernetes
		if n, ok := nodes.of(m); ok {
			k = &n
		}
		st := m.Status
		st.Kubernetes = k
		nodeVerdict(&st, r.now)
		if SameMachine(m.Status, st) {
			continue
		}
		changed = true
		if r.check {
			continue
		}
		if err := r.machineHistory(tenant, m.Metadata.Name, m.Status, st); err != nil {
			return changed, err
		}
		m.Status = st
		if err := r.put(schema.KindMachine, m.Metadata.Name, m); err != nil {
			return changed, err
		}
	}
	return changed, nil
}
