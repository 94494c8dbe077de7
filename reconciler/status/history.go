package status

import "github.com/rezuscloud/rezuscloud/schema"

// machineHistory records in the history of machine (of tenant) the
// transition from prev to st, when its stage, readiness, connection or
// config freshness changes, in the recorder's transaction.
func (r Recorder) machineHistory(tenant, machine string, prev, st schema.MachineStatus) error {
	// TODO(history): record through package history.
	_ = tenant
	_ = machine
	_ = prev
	_ = st
	return nil
}
