package reconciler

import (
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Requests returns the reconciler's answer to reconcile requests
// (POST /api/v1/reconcile): fetch is called first (the source's Trigger,
// nil when there is none), then the tenant's pending retry runs now.
func (r *Reconciler) Requests(fetch func()) ReconcileRequests {
	return ReconcileRequests{r: r, fetch: fetch}
}

// ReconcileRequests answers reconcile requests for a reconciler; see
// Reconciler.Requests.
type ReconcileRequests struct {
	r     *Reconciler
	fetch func()
}

// RequestReconcile fetches the source and moves the pending run of tenant
// (of every tenant when "") to now. A tenant whose run is in progress is
// left alone; one with nothing pending is reported as stalled, gets a
// drift check now when it is drifted (see driftNow), or is reported up to
// date. Nothing of the desired state changes.
func (q ReconcileRequests) RequestReconcile(tenant string) api.ReconcileResponse {
	var res api.ReconcileResponse
	if q.fetch != nil {
		q.fetch()
		res.SourceFetch = true
	}
	keys := []string{tenant}
	if tenant == "" {
		keys = q.r.queue.keys()
		for _, name := range q.r.driftedTenants() {
			if !slices.Contains(keys, name) {
				keys = append(keys, name)
			}
		}
		slices.Sort(keys)
	}
	for _, key := range keys {
		res.Tenants = append(res.Tenants, q.r.hurry(key))
	}
	return res
}

// hurry moves the pending run of tenant to now, and says what it did.
func (r *Reconciler) hurry(tenant string) api.ReconcileTenant {
	switch r.queue.hurry(tenant) {
	case hurryRunning:
		return api.ReconcileTenant{Tenant: tenant, Action: api.ReconcileRunning, Message: "a run is in progress"}
	case hurryMoved:
		r.log.Info("pending run moved to now on request", "tenant", tenant)
		return api.ReconcileTenant{Tenant: tenant, Action: api.ReconcileQueued, Message: "the pending run starts now"}
	}
	if r.suspended(tenant) {
		return api.ReconcileTenant{Tenant: tenant, Action: api.ReconcileUpToDate,
			Message: "the tenant is suspended (" + schema.AnnotationSuspend + "); nothing runs for it until a commit resumes it"}
	}
	var tn *schema.Tenant
	_ = r.store.View(func(tx store.Tx) (err error) {
		tn, err = getJSON[schema.Tenant](tx, schema.KindTenant, tenant)
		return err
	})
	if tn != nil && tn.Status.Conditions.IsTrue(schema.ConditionStalled) {
		return api.ReconcileTenant{Tenant: tenant, Action: api.ReconcileStalled,
			Message: "the last run stalled; only a new commit can help: " + tn.Status.Message}
	}
	if tn != nil && tn.Status.Conditions.IsTrue(schema.ConditionDrifted) {
		return r.driftNow(tenant)
	}
	return api.ReconcileTenant{Tenant: tenant, Action: api.ReconcileUpToDate, Message: "nothing waits to run"}
}

// What Queue.hurry did.
const (
	hurryNothing = iota // no job of the key is pending or running
	hurryRunning        // a job of the key runs now
	hurryMoved          // the pending job of the key is ready now
)

// hurry makes the pending job of key (a retry waiting for its backoff, a
// revision waiting for the debounce) ready to run now.
func (q *Queue) hurry(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.pending[key]; e != nil {
		e.readyAt = time.Now()
		q.cond.Broadcast()
		return hurryMoved
	}
	if q.running[key] != nil {
		return hurryRunning
	}
	return hurryNothing
}

// keys returns the keys with a pending or running job, sorted.
func (q *Queue) keys() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := slices.Clone(q.order)
	for k := range q.running {
		if q.pending[k] == nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
