package talos

import "fmt"

// SuspendedError says that a rollout stopped between two machines because
// its tenant was suspended meanwhile (Desired.Suspended). No operation was
// left half done; the rollout resumes with the next machine once a run
// finds the tenant no longer suspended.
type SuspendedError struct {
	Tenant string
	// Done and Of count the machines the rollout had finished and those it
	// touches.
	Done, Of int
}

func (e *SuspendedError) Error() string {
	return fmt.Sprintf("tenant %s: rollout paused after %d of %d machines: the tenant is suspended", e.Tenant, e.Done, e.Of)
}

// suspended reports whether d's tenant is suspended now.
func (d Desired) suspended() bool { return d.Suspended != nil && d.Suspended() }
