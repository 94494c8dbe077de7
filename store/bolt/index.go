package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/rezuscloud/rezuscloud/store"
)

// The tenant index answers which objects belong to a tenant, by the one
// rule of schema.TenantOf. PutObject and Delete keep it: bucketTenants has
// the key tenantKey(tenant, kind, key) for every stored object that
// belongs to a tenant, and nothing else.

// tenantPrefix is the start of the index keys of tenant's objects of kind:
// the tenant and the kind, each as a uvarint length and its bytes.
func tenantPrefix(tenant, kind string) []byte {
	b := make([]byte, 0, 2*binary.MaxVarintLen64+len(tenant)+len(kind))
	b = binary.AppendUvarint(b, uint64(len(tenant)))
	b = append(b, tenant...)
	b = binary.AppendUvarint(b, uint64(len(kind)))
	return append(b, kind...)
}

func tenantKey(tenant, kind, key string) []byte {
	return append(tenantPrefix(tenant, kind), key...)
}

// reindex moves kind/key in the tenant index from tenant from to tenant
// to; "" is no tenant.
func (tx *Tx) reindex(kind, key, from, to string) error {
	if from == to {
		return nil
	}
	idx := tx.tx.Bucket(bucketTenants)
	if from != "" {
		if err := idx.Delete(tenantKey(from, kind, key)); err != nil {
			return fmt.Errorf("tenant index: %s %q: %w", kind, key, err)
		}
	}
	if to != "" {
		if err := idx.Put(tenantKey(to, kind, key), []byte{}); err != nil {
			return fmt.Errorf("tenant index: %s %q: %w", kind, key, err)
		}
	}
	return nil
}

// TenantObjects calls fn with each resource of kind that belongs to
// tenant, in key order, until fn returns an error, which TenantObjects
// returns. A Tenant belongs to itself; objects of the kinds that live in
// tenants belong to the tenant their schema.LabelTenant label names. As
// with Scan, the Resource's Object is valid only until fn returns, and fn
// must not change the store.
func (tx *Tx) TenantObjects(tenant, kind string, fn func(store.Resource) error) error {
	if tenant == "" {
		return nil
	}
	prefix := tenantPrefix(tenant, kind)
	c := tx.tx.Bucket(bucketTenants).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		r, err := tx.stored(kind, string(k[len(prefix):]))
		if err != nil {
			return fmt.Errorf("tenant index of %s: %w", tenant, err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
