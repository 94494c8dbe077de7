package reconciler

import (
	"errors"

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

// viewRecord reads one record in a transaction of its own: nil, and no
// error, when the store holds none under key.
func viewRecord[T any](st store.Store, kind, key string) (*T, error) {
	var rec *T
	err := st.View(func(tx store.Tx) error {
		v, err := getJSON[T](tx, kind, key)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		rec = v
		return err
	})
	return rec, err
}
