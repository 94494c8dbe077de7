package talos

import (
	"fmt"
	"reflect"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Progress is where a tenant's rollout stands, for status.
type Progress struct {
	Tenant string `json:"tenant"`
	// Active is set while machines remain to be changed.
	Active bool `json:"active"`
	// N and Total: the machine being worked on is machine N of Total.
	N     int `json:"n,omitempty"`
	Total int `json:"total,omitempty"`
	// Machine, NodeGroup and Op name the current operation (MachineID is
	// its machine's id); Stage is its machine's stage as last observed.
	Machine   string `json:"machine,omitempty"`
	MachineID string `json:"machineID,omitempty"`
	NodeGroup string `json:"nodeGroup,omitempty"`
	Op        string `json:"op,omitempty"`
	Stage     string `json:"stage,omitempty"`
	// Groups counts per node group: machines to change and changed.
	Groups map[string]GroupProgress `json:"groups,omitempty"`
	// Failed is why the rollout stopped, if it did.
	Failed *Failure `json:"failed,omitempty"`
}

// GroupProgress counts one node group's machines in a rollout.
type GroupProgress struct {
	Total    int `json:"total"`
	Finished int `json:"finished"`
}

// Message says in one line where the rollout stands.
func (p Progress) Message() string {
	switch {
	case p.Failed != nil:
		return fmt.Sprintf("rollout stopped at machine %s (%s): %s", labelOf(p.Failed.Machine, p.Failed.Name), p.Failed.Op, p.Failed.Reason)
	case !p.Active:
		return ""
	case p.Machine == "":
		return fmt.Sprintf("rolling out: machine %d of %d waits for its gates", p.N, p.Total)
	}
	s := fmt.Sprintf("rolling out: machine %d of %d, %s (%s)", p.N, p.Total, p.Machine, p.Op)
	if p.Stage != "" {
		s += ": " + p.Stage
	}
	return s
}

// Status is the tenant's status.rollout this progress gives: nil unless
// machines remain to be changed. The machine is named by its host name
// from machines (the tenant's, as stored) when it has one.
func (p Progress) Status(machines []*schema.Machine) *schema.RolloutStatus {
	if !p.Active {
		return nil
	}
	st := &schema.RolloutStatus{N: p.N, Total: p.Total, Machine: p.MachineID, NodeGroup: p.NodeGroup, Op: p.Op, Stage: p.Stage}
	for _, m := range machines {
		if m.Metadata.Name == p.MachineID && m.Spec.Hostname != "" {
			st.Machine = m.Spec.Hostname
		}
	}
	return st
}

// ProgressOf computes the progress a rollout record shows.
func ProgressOf(rec RolloutRecord) Progress {
	p := Progress{Tenant: rec.Tenant, Failed: rec.Failed, Total: len(rec.Touched)}
	for id, group := range rec.Touched {
		if p.Groups == nil {
			p.Groups = map[string]GroupProgress{}
		}
		g := p.Groups[group]
		g.Total++
		if rec.Finished[id] {
			g.Finished++
		}
		p.Groups[group] = g
	}
	finished := 0
	for id := range rec.Touched {
		if rec.Finished[id] {
			finished++
		}
	}
	p.Active = rec.Failed == nil && (finished < p.Total || rec.Current != nil)
	if p.Active {
		p.N = min(finished+1, p.Total)
	}
	if op := rec.Current; op != nil {
		p.Machine, p.MachineID, p.NodeGroup, p.Op = labelOf(op.Machine, op.Name), op.Machine, op.NodeGroup, op.Op
	}
	return p
}

// report tells Options.OnProgress about a change of progress; o is the
// current machine's latest observation, if there is one.
func (pl *Plane) report(rec *RolloutRecord, o *Observation) {
	p := ProgressOf(*rec)
	if o != nil && p.Machine != "" {
		p.Stage = stageWord(*o)
	}
	pl.progressMu.Lock()
	same := reflect.DeepEqual(pl.lastProgress[rec.Tenant], p)
	if !same {
		pl.lastProgress[rec.Tenant] = p
	}
	pl.progressMu.Unlock()
	if !same {
		if pl.opts.OnProgress != nil {
			pl.opts.OnProgress(p)
		}
		select { // the observer writes the new progress into status
		case pl.kick <- struct{}{}:
		default:
		}
	}
}

// stageWord is how progress names a machine's stage.
func stageWord(o Observation) string {
	if !o.Connected {
		return "not connected"
	}
	return string(o.Stage)
}
