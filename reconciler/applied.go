package reconciler

import (
	"encoding/json"
	"fmt"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/store"
)

// kindApplied is the store kind of the reconciler's own record of what it
// applied to each tenant. The API does not serve it.
const kindApplied = "AppliedTenant"

// appliedRecord is what the reconciler remembers of a tenant after a run.
type appliedRecord struct {
	Tenant       string            `json:"tenant"`
	Revision     string            `json:"revision"`
	Generation   int64             `json:"generation,omitempty"`
	InputHash    string            `json:"inputHash"`
	RenderedHash string            `json:"renderedHash"`
	InitInputs   []byte            `json:"initInputs"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Model        modeldiff.Model   `json:"model"`
}

// appliedRecords returns every tenant's applied record, by tenant.
func (r *Reconciler) appliedRecords() (map[string]*appliedRecord, error) {
	out := map[string]*appliedRecord{}
	err := r.store.View(func(tx store.Tx) error {
		list, err := tx.List(kindApplied)
		if err != nil {
			return err
		}
		for _, res := range list {
			var rec appliedRecord
			if err := json.Unmarshal(res.Object, &rec); err != nil {
				return fmt.Errorf("applied record %s: %w", res.Name, err)
			}
			out[rec.Tenant] = &rec
		}
		return nil
	})
	return out, err
}

// appliedRecord returns what the reconciler last applied to a tenant, or
// nil when it never did.
func (r *Reconciler) appliedRecord(tenant string) (*appliedRecord, error) {
	return viewRecord[appliedRecord](r.store, kindApplied, tenant)
}
