package reconciler

import (
	"context"
	"errors"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/store"
)

// markDeleting gives a tenant that left git its deletionTimestamp and
// finalizers, and the phase removing (status.Recorder.Removing).
func (r *Reconciler) markDeleting(name string, gen int64) error {
	return r.store.Update(func(tx store.Tx) error {
		return status.Record(tx, r.opts.Now()).Removing(name, gen)
	})
}

// removeTenant runs after a successful destroy: the machines go and their
// finalizer clears, the current state goes (its history stays) and the
// secrets finalizer clears, then the tenant's records go.
func (r *Reconciler) removeTenant(ctx context.Context, name string, creds tofu.Creds) error {
	err := r.store.Update(func(tx store.Tx) error {
		return status.Record(tx, r.opts.Now()).MachinesDestroyed(name)
	})
	if err != nil {
		return err
	}
	if err := (tofu.StateClient{Creds: creds}).Delete(ctx); err != nil {
		return err
	}
	return r.store.Update(func(tx store.Tx) error {
		if err := status.Record(tx, r.opts.Now()).Removed(name); err != nil {
			return err
		}
		if _, err := tx.Delete(kindApplied, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
}
