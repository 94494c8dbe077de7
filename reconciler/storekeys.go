package reconciler

import (
	"github.com/rezuscloud/rezuscloud/store"
)

// Store keys of the resources the reconciler writes. Tenant-scoped kinds
// are keyed "TENANT/NAME" so that names need only be unique per tenant.
//
//	Tenant       TENANT
//	NodeGroup    TENANT/NODEGROUP
//	ConfigPatch  TENANT/PATCH
//	Machine      PROVIDER-ID
//	Commit       REVISION (":" replaced by "-")
//	Provider     PROVIDER-CLASS
func scopedKey(tenant, name string) string { return tenant + "/" + name }

// getJSON decodes the object kind/key of tx into a new T; the error wraps
// store.ErrNotFound when there is none.
func getJSON[T any](tx store.Tx, kind, key string) (*T, error) {
	v := new(T)
	if err := tx.GetObject(kind, key, v); err != nil {
		return nil, err
	}
	return v, nil
}
