package talos

import "fmt"

// WaitingError says that the plane cannot go on yet for a passing reason:
// a machine is not ready, etcd is not healthy, a machine does not answer.
// The same call later may succeed.
type WaitingError struct {
	Tenant string
	// Machine is the machine waited for, if one.
	Machine string
	Reason  string
	// Cause is the condition reason of the wait when it is not
	// schema.ReasonWaitingForMachines.
	Cause string
}

func (e *WaitingError) Error() string {
	if e.Machine != "" {
		return fmt.Sprintf("tenant %s: waiting for machine %s: %s", e.Tenant, e.Machine, e.Reason)
	}
	return fmt.Sprintf("tenant %s: waiting: %s", e.Tenant, e.Reason)
}

// StoppedError says that a rollout stopped at a machine that failed, and
// stays stopped until the desired state changes (a new commit).
type StoppedError struct {
	Tenant  string
	Machine string
	// Op is what failed: "apply", "upgrade" or "reboot".
	Op string
	// Cause is the condition reason: schema.ReasonDrainTimeout for a
	// drain that did not finish, empty for a machine that failed.
	Cause  string
	Reason string
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("tenant %s: rollout stopped at machine %s (%s): %s; the other machines were left as they are until a new commit changes the tenant",
		e.Tenant, e.Machine, e.Op, e.Reason)
}

// SupersededError says that a drain stopped because a newer revision
// waits to run for the tenant: nothing was disrupted, and the Node stays
// cordoned and recorded in the rollout record, so that the newer
// revision's rollout drains it again or uncordons it.
type SupersededError struct {
	Tenant  string
	Machine string
	Node    string
}

func (e *SupersededError) Error() string {
	return fmt.Sprintf("tenant %s: a newer revision waits: the drain of node %s of machine %s stopped before the machine was disrupted, and the newer revision's run goes on from there",
		e.Tenant, e.Node, e.Machine)
}
