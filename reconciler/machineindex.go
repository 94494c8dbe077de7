package reconciler

import (
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/schema"
)

// machineIndex is the part of appliedIndex that tells, without reading
// the store, whether the Talos plane may have work on a tenant whose
// manifests did not change (talosWanted): whether it has machines the
// plane works on (talos.MachineOf), and whether one of its machines is a
// bare-metal machine that is not connected, as the observer saw it last:
// it waits in maintenance mode (or is off, or has not been probed yet), so
// ConfigureMetal may have work. Of each stored Machine it keeps only
// those two facts and its tenant; its methods are called with the
// appliedIndex's mu held.
type machineIndex struct {
	facts map[string]machineFacts // by Machine name
	talos map[string]int          // by tenant: machines the plane works on
	metal map[string]int          // by tenant: bare-metal machines not connected
	bad   map[string]error        // Machines that do not decode
}

type machineFacts struct {
	tenant       string
	talos, metal bool
}

func newMachineIndex() machineIndex {
	return machineIndex{facts: map[string]machineFacts{}, talos: map[string]int{}, metal: map[string]int{}, bad: map[string]error{}}
}

// put records the Machine name stored as data.
func (mi *machineIndex) put(name string, data []byte) {
	var m struct {
		Metadata schema.ObjectMeta  `json:"metadata"`
		Spec     schema.MachineSpec `json:"spec"`
		Status   struct {
			Connected bool `json:"connected"`
		} `json:"status"`
	}
	mi.delete(name)
	if err := json.Unmarshal(data, &m); err != nil {
		mi.bad[name] = fmt.Errorf("machine %s: %w", name, err)
		return
	}
	f := machineFacts{
		tenant: schema.TenantOf(schema.KindMachine, &m.Metadata),
		talos:  worksOn(&schema.Machine{Metadata: m.Metadata, Spec: m.Spec}),
		metal:  m.Spec.ProviderClass == metal.Class && !m.Status.Connected,
	}
	mi.facts[name] = f
	mi.count(f, 1)
}

// worksOn reports whether the Talos plane works on m.
func worksOn(m *schema.Machine) bool {
	_, ok := talos.MachineOf(m)
	return ok
}

// delete forgets the Machine name.
func (mi *machineIndex) delete(name string) {
	delete(mi.bad, name)
	if f, ok := mi.facts[name]; ok {
		mi.count(f, -1)
		delete(mi.facts, name)
	}
}

func (mi *machineIndex) count(f machineFacts, n int) {
	for _, c := range []struct {
		counts map[string]int
		is     bool
	}{{mi.talos, f.talos}, {mi.metal, f.metal}} {
		if !c.is {
			continue
		}
		if c.counts[f.tenant] += n; c.counts[f.tenant] == 0 {
			delete(c.counts, f.tenant)
		}
	}
}

// of reports whether the plane works on one of tenant's machines, and
// whether one of them is a bare-metal machine that is not connected.
func (mi *machineIndex) of(tenant string) (talos, metalWaiting bool, err error) {
	for _, err := range mi.bad {
		return false, false, err
	}
	return mi.talos[tenant] > 0, mi.metal[tenant] > 0, nil
}
