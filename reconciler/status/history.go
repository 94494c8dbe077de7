package status

import (
	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
)

// The recorder keeps package history's record of what it writes, in its
// own transaction: a machine's transitions and reboots, a tenant's
// availability and the marks of its rollouts and restores. History fails a
// status write only with the store's error.

// machineHistory records in the history of machine (of tenant) the
// transition from prev to st, when its stage, readiness, connection or
// config freshness changes, and a reboot mark when it enters restarting.
func (r Recorder) machineHistory(tenant, machine string, prev, st schema.MachineStatus) error {
	from, to := transition(prev), transition(st)
	if from.Same(to) || tenant == "" || r.check {
		return nil
	}
	to.At = r.now
	if err := history.RecordTransition(r.tx, tenant, machine, to); err != nil {
		return err
	}
	if st.Stage != schema.StageRestarting || prev.Stage == schema.StageRestarting {
		return nil
	}
	return history.RecordMark(r.tx, tenant, schema.HistoryMark{At: r.now, Kind: schema.MarkReboot, Machine: machine})
}

// transition is the state of st that history follows.
func transition(st schema.MachineStatus) schema.MachineTransition {
	return schema.MachineTransition{Stage: st.Stage, Ready: st.Ready, Connected: st.Connected, ConfigUpToDate: st.ConfigUpToDate}
}

// tenantHistory records the tenant's availability when it changes from
// prev to st, and a mark when a rollout starts or ends (its Upgrading
// condition turns true or false).
func (r Recorder) tenantHistory(tenant string, prev, st schema.TenantStatus) error {
	if r.check {
		return nil
	}
	a := schema.TenantAvailability{At: r.now, Ready: st.Machines.Ready, Desired: st.Machines.Desired, APIReady: st.APIReady}
	if a.Ready != prev.Machines.Ready || a.Desired != prev.Machines.Desired || a.APIReady != prev.APIReady {
		if err := history.RecordAvailability(r.tx, tenant, a); err != nil {
			return err
		}
	}
	was, is := upgrading(prev), upgrading(st)
	if (was != nil) == (is != nil) {
		return nil
	}
	m := schema.HistoryMark{At: r.now, Kind: schema.MarkRolloutStarted}
	if is == nil {
		m.Kind, m.Message = schema.MarkRolloutFinished, upgradingMessage(st)
	} else {
		m.Message = is.Message
	}
	return history.RecordMark(r.tx, tenant, m)
}

// upgrading is st's Upgrading condition while it is true, else nil.
func upgrading(st schema.TenantStatus) *schema.Condition {
	for i, c := range st.Conditions {
		if c.Type == schema.ConditionUpgrading && c.Status == schema.ConditionTrue {
			return &st.Conditions[i]
		}
	}
	return nil
}

// upgradingMessage is what st's Upgrading condition says, if it has one.
func upgradingMessage(st schema.TenantStatus) string {
	for _, c := range st.Conditions {
		if c.Type == schema.ConditionUpgrading {
			return c.Message
		}
	}
	return ""
}

// restoreHistory marks the start and the end of a restore of the tenant's
// etcd as its status moves from the one in backup to rs.
func (r Recorder) restoreHistory(tenant string, backup *schema.BackupStatus, rs *schema.RestoreStatus) error {
	if rs == nil || r.check {
		return nil
	}
	var prev *schema.RestoreStatus
	if backup != nil {
		prev = backup.Restore
	}
	started := prev == nil || prev.Backup != rs.Backup || !prev.StartedAt.Equal(rs.StartedAt)
	if started {
		m := schema.HistoryMark{At: r.now, Kind: schema.MarkRestoreStarted, Message: "restore of backup " + rs.Backup}
		if err := history.RecordMark(r.tx, tenant, m); err != nil {
			return err
		}
	}
	if rs.FinishedAt.IsZero() || (!started && !prev.FinishedAt.IsZero()) {
		return nil
	}
	msg := "backup " + rs.Backup + " restored"
	if rs.Message != "" {
		msg = rs.Message
	}
	return history.RecordMark(r.tx, tenant, schema.HistoryMark{At: r.now, Kind: schema.MarkRestoreFinished, Message: msg})
}
