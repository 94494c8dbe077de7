package reconciler

import (
	"context"
	"errors"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// markDeleting gives a tenant that left git its deletionTimestamp and
// finalizers, and the phase removing.
func (r *Reconciler) markDeleting(name string, gen int64) error {
	now := r.opts.Now()
	return r.recordOutcome(name, nil, gen, func(t *schema.Tenant) status.Outcome {
		if t.Metadata.DeletionTimestamp == nil {
			t.Metadata.DeletionTimestamp = &now
		}
		t.Metadata.Finalizers = []string{schema.FinalizerMachines, schema.FinalizerSecrets}
		t.Status.Phase = schema.TenantRemoving
		return status.Destroying(gen)
	})
}

// removeTenant runs after a successful destroy: the machines go and their
// finalizer clears, the current state goes (its history stays) and the
// secrets finalizer clears, then the tenant's records go.
func (r *Reconciler) removeTenant(ctx context.Context, name string, creds tofu.Creds) error {
	err := r.store.Update(func(tx store.Tx) error {
		if err := deleteTenantObjects(tx, name, schema.KindMachine, nil); err != nil {
			return err
		}
		t, err := getJSON[schema.Tenant](tx, schema.KindTenant, name)
		if err != nil {
			return nil
		}
		t.Metadata.Finalizers = []string{schema.FinalizerSecrets}
		_, err = tx.PutObject(schema.KindTenant, name, t)
		return err
	})
	if err != nil {
		return err
	}
	if err := deleteState(ctx, creds); err != nil {
		return err
	}
	return r.store.Update(func(tx store.Tx) error {
		for _, kind := range []string{schema.KindNodeGroup, schema.KindConfigPatch} {
			if err := deleteTenantObjects(tx, name, kind, nil); err != nil {
				return err
			}
		}
		if t, err := getJSON[schema.Tenant](tx, schema.KindTenant, name); err == nil {
			t.Metadata.Finalizers = nil
			if _, err := tx.PutObject(schema.KindTenant, name, t); err != nil {
				return err
			}
			if _, err := tx.Delete(schema.KindTenant, name); err != nil {
				return err
			}
		}
		if _, err := tx.Delete(kindApplied, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
}

// deleteTenantObjects deletes the objects of kind that belong to tenant,
// except those keep names.
func deleteTenantObjects(tx store.Tx, tenant, kind string, keep map[string]bool) error {
	var gone []string
	err := tx.TenantObjects(tenant, kind, func(res store.Resource) error {
		if !keep[res.Name] {
			gone = append(gone, res.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, key := range gone {
		if _, err := tx.Delete(kind, key); err != nil {
			return err
		}
	}
	return nil
}
