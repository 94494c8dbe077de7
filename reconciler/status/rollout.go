package status

import (
	"fmt"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Rollout is where a tenant's rollout through its machines stands, as the
// Talos plane reports it: what the Upgrading condition and status.rollout
// are computed from.
type Rollout struct {
	Tenant string `json:"tenant"`
	// Active is set while machines remain to be changed.
	Active bool `json:"active"`
	// N and Total: the machine being worked on is machine N of Total.
	N     int `json:"n,omitempty"`
	Total int `json:"total,omitempty"`
	// Machine, NodeGroup and Op name the current operation (Machine as
	// messages name it, MachineID its machine's id); Stage is its
	// machine's stage as last observed.
	Machine   string `json:"machine,omitempty"`
	MachineID string `json:"machineID,omitempty"`
	NodeGroup string `json:"nodeGroup,omitempty"`
	Op        string `json:"op,omitempty"`
	Stage     string `json:"stage,omitempty"`
	// Waiting says what the rollout waits for beyond the machine: a drain,
	// its Node, the Kubernetes API, workloads.
	Waiting string `json:"waiting,omitempty"`
	// Kubernetes says where an upgrade of Kubernetes stands, while one is
	// under way: "Kubernetes 1.36.4 → 1.37.1: kube-apiserver (1 of 4)".
	Kubernetes string `json:"kubernetes,omitempty"`
	// Groups counts per node group: machines to change and changed.
	Groups map[string]RolloutGroup `json:"groups,omitempty"`
	// Failed is why the rollout stopped, if it did.
	Failed *RolloutFailure `json:"failed,omitempty"`
}

// RolloutGroup counts one node group's machines in a rollout.
type RolloutGroup struct {
	Total    int `json:"total"`
	Finished int `json:"finished"`
}

// RolloutFailure is the machine and operation a rollout stopped at.
type RolloutFailure struct {
	// Machine names the machine as messages do.
	Machine   string `json:"machine"`
	NodeGroup string `json:"nodeGroup"`
	Op        string `json:"op"`
	Reason    string `json:"reason"`
}

// Message says in one line where the rollout stands.
func (p Rollout) Message() string {
	m := p.machineMessage()
	if p.Kubernetes != "" && p.Failed == nil {
		return p.Kubernetes + "; " + m
	}
	return m
}

func (p Rollout) machineMessage() string {
	switch {
	case p.Failed != nil:
		return fmt.Sprintf("rollout stopped at machine %s (%s): %s", p.Failed.Machine, p.Failed.Op, p.Failed.Reason)
	case !p.Active:
		return ""
	case p.Machine == "" && p.Waiting != "":
		return fmt.Sprintf("rolling out: machine %d of %d: %s", p.N, p.Total, p.Waiting)
	case p.Machine == "":
		return fmt.Sprintf("rolling out: machine %d of %d waits for its gates", p.N, p.Total)
	}
	s := fmt.Sprintf("rolling out: machine %d of %d, %s (%s)", p.N, p.Total, p.Machine, p.Op)
	if p.Stage != "" {
		s += ": " + p.Stage
	}
	if p.Waiting != "" {
		s += "; waiting for " + p.Waiting
	}
	return s
}

// Status is the tenant's status.rollout this progress gives: nil unless
// machines remain to be changed. The machine is named by its host name
// from machines (the tenant's, as stored) when it has one.
func (p Rollout) Status(machines []*schema.Machine) *schema.RolloutStatus {
	if !p.Active {
		return nil
	}
	st := &schema.RolloutStatus{N: p.N, Total: p.Total, Machine: p.MachineID, NodeGroup: p.NodeGroup, Op: p.Op, Stage: p.Stage,
		Waiting: p.Waiting, Kubernetes: p.Kubernetes}
	for _, m := range machines {
		if m.Metadata.Name == p.MachineID && m.Spec.Hostname != "" {
			st.Machine = m.Spec.Hostname
		}
	}
	return st
}

// Upgrading is the Upgrading condition a rollout's progress gives a
// tenant (group ""), or one of its node groups: True while machines remain
// to be changed, with machine n of N and the current machine's stage;
// False when the rollout stopped at a failed machine, which it names, or
// when all is done.
func Upgrading(p Rollout, group string) schema.Condition {
	c := schema.Condition{Type: schema.ConditionUpgrading, Status: schema.ConditionFalse, Reason: schema.ReasonUpToDate,
		Message: "every machine runs its node group's config and Talos version"}
	g, inGroup := p.Groups[group]
	switch {
	case p.Failed != nil && (group == "" || p.Failed.NodeGroup == group):
		c.Reason, c.Message = schema.ReasonRolloutFailed, p.Message()
	case p.Active && group == "":
		c.Status, c.Reason, c.Message = schema.ConditionTrue, schema.ReasonRollingOut, p.Message()
	case p.Active && inGroup && g.Finished < g.Total:
		c.Status, c.Reason = schema.ConditionTrue, schema.ReasonRollingOut
		c.Message = fmt.Sprintf("rolling out: %d of %d machines of the node group done", g.Finished, g.Total)
		if p.NodeGroup == group && p.Machine != "" {
			c.Message += fmt.Sprintf("; now %s (%s)", p.Machine, p.Op)
		}
	}
	return c
}
