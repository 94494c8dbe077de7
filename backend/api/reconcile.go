package api

// ReconcileRequest is the body of POST /api/v1/reconcile: empty, or the
// one tenant to retry now. Without a tenant every tenant whose retry is
// pending runs now.
type ReconcileRequest struct {
	Tenant string `json:"tenant,omitempty"`
}

// ReconcileResponse is the 202 answer of POST /api/v1/reconcile: what the
// request set in motion. It changes no desired state.
type ReconcileResponse struct {
	// SourceFetch says that the source was asked to fetch at once.
	SourceFetch bool `json:"sourceFetch"`
	// Tenants lists what happens to each tenant the request names (all
	// known tenants without one).
	Tenants []ReconcileTenant `json:"tenants,omitempty"`
}

// ReconcileTenant is what a reconcile request did for one tenant.
type ReconcileTenant struct {
	Tenant string `json:"tenant"`
	// Action is one of the ReconcileAction values.
	Action string `json:"action"`
	// Message says it in words, for people.
	Message string `json:"message,omitempty"`
}

// The actions of ReconcileTenant.
const (
	// ReconcileQueued: the tenant's pending retry was moved to now.
	ReconcileQueued = "Queued"
	// ReconcileRunning: a run of the tenant is in progress; it is left
	// alone, and the fetch brings any new commit after it.
	ReconcileRunning = "Running"
	// ReconcileStalled: the tenant's last run stalled; only a new commit
	// can help, which the fetch brings if there is one.
	ReconcileStalled = "Stalled"
	// ReconcileUpToDate: nothing waits for the tenant.
	ReconcileUpToDate = "UpToDate"
)
