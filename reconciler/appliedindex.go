package reconciler

import (
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// appliedIndex keeps in memory what a revision's validation and its quiet
// check read of every tenant's records: of its applied record the input
// hash, revision, generation and annotations (not the model or the init
// inputs), whether its stored Tenant's status is settled, and what its
// Machines tell of the Talos plane's work (machineIndex). It follows
// the store through the store's commit hook: every committed change of an
// applied record or a Tenant, whoever writes it, updates it before the
// write returns.
type appliedIndex struct {
	mu       sync.Mutex
	stopped  bool
	applied  map[string]*appliedRecord
	settled  map[string]bool
	bad      map[string]error // applied records that do not decode
	machines machineIndex
}

// openIndex reads every applied record and Tenant into a new index and
// hooks it to the store's commits. The reading happens in a write
// transaction, which the next write waits for, and the hook is in place
// before it ends: no change is missed, none is applied to stale data.
func openIndex(st store.Store) (*appliedIndex, error) {
	idx := &appliedIndex{applied: map[string]*appliedRecord{}, settled: map[string]bool{}, bad: map[string]error{},
		machines: newMachineIndex()}
	err := st.Update(func(tx store.Tx) error {
		err := tx.Scan(kindApplied, "", func(res store.Resource) error {
			idx.putApplied(res.Name, res.Object)
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Scan(schema.KindTenant, "", func(res store.Resource) error {
			idx.settled[res.Name] = settledStatus(res.Object)
			return nil
		})
		if err != nil {
			return err
		}
		err = tx.Scan(schema.KindMachine, "", func(res store.Resource) error {
			idx.machines.put(res.Name, res.Object)
			return nil
		})
		if err != nil {
			return err
		}
		st.OnCommit(idx.follow)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read applied records: %w", err)
	}
	return idx, nil
}

// putApplied records the applied record of tenant stored as data.
func (idx *appliedIndex) putApplied(tenant string, data []byte) {
	var rec struct {
		Tenant      string            `json:"tenant"`
		Revision    string            `json:"revision"`
		Generation  int64             `json:"generation"`
		InputHash   string            `json:"inputHash"`
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		delete(idx.applied, tenant)
		idx.bad[tenant] = fmt.Errorf("applied record %s: %w", tenant, err)
		return
	}
	delete(idx.bad, tenant)
	idx.applied[tenant] = &appliedRecord{Tenant: rec.Tenant, Revision: rec.Revision, Generation: rec.Generation,
		InputHash: rec.InputHash, Annotations: rec.Annotations}
}

// follow is the index's commit hook.
func (idx *appliedIndex) follow(changes []store.Change) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if idx.stopped {
		return
	}
	for _, c := range changes {
		res := c.Resource
		switch {
		case res.Kind == kindApplied && c.Type == store.Deleted:
			delete(idx.applied, res.Name)
			delete(idx.bad, res.Name)
		case res.Kind == kindApplied:
			idx.putApplied(res.Name, res.Object)
		case res.Kind == schema.KindTenant && c.Type == store.Deleted:
			delete(idx.settled, res.Name)
		case res.Kind == schema.KindTenant:
			idx.settled[res.Name] = settledStatus(res.Object)
		case res.Kind == schema.KindMachine && c.Type == store.Deleted:
			idx.machines.delete(res.Name)
		case res.Kind == schema.KindMachine:
			idx.machines.put(res.Name, res.Object)
		}
	}
}

// records returns the applied records, keyed by tenant, as the index has
// them: without model and init inputs. They must not be modified.
func (idx *appliedIndex) records() (map[string]*appliedRecord, error) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	for _, err := range idx.bad {
		return nil, err
	}
	return maps.Clone(idx.applied), nil
}

// isSettled reports whether each of tenants has a stored status that is
// settled (see settledStatus).
func (idx *appliedIndex) isSettled(tenants []string) map[string]bool {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	out := make(map[string]bool, len(tenants))
	for _, name := range tenants {
		out[name] = idx.settled[name]
	}
	return out
}

// talosFacts reports whether the Talos plane works on one of tenant's
// stored machines, and whether one of them is a bare-metal machine that
// is not connected (see machineIndex).
func (idx *appliedIndex) talosFacts(tenant string) (talos, metalWaiting bool, err error) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	return idx.machines.of(tenant)
}

// stop unhooks the index from the store: it is of no use once its
// reconciler is closed.
func (idx *appliedIndex) stop() {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	idx.stopped = true
	idx.applied, idx.settled, idx.bad = nil, nil, nil
	idx.machines = machineIndex{}
}
