package reconciler

import (
	"context"
	"fmt"

	"github.com/rezuscloud/rezuscloud/internal/machinelog"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// OpenLogs opens a log stream (the API's machine logs, see cmd/rezuscloud): a log stream from the Talos API
// of one of a tenant's machines, with an os:admin client certificate of
// the tenant's secrets bundle.
func (r *Reconciler) OpenLogs(ctx context.Context, tenant, machine string, req machinelog.Request) (machinelog.Stream, error) {
	var m *schema.Machine
	err := r.store.View(func(tx store.Tx) error {
		var err error
		m, err = getJSON[schema.Machine](tx, schema.KindMachine, machine)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", machine, err)
	}
	if owner := schema.TenantOf(schema.KindMachine, &m.Metadata); owner != tenant {
		return nil, fmt.Errorf("machine %s belongs to tenant %s, not %s: %w", machine, owner, tenant, store.ErrNotFound)
	}
	if m.Spec.ManagementAddress == "" {
		return nil, fmt.Errorf("machine %s has no management address yet: %w", machine, machinelog.ErrUnreachable)
	}
	_, bundle, err := r.appliedTenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	c, release, err := r.talosPool().Admin(tenant, bundle, m.Spec.ManagementAddress)
	if err != nil {
		return nil, err
	}
	label := machine + " at " + m.Spec.ManagementAddress
	return talos.OpenLogs(ctx, c, release, label, req)
}
