package talos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// ObserverOptions configure Plane.RunObserver.
type ObserverOptions struct {
	// Interval is how often the machines are looked at; each is probed at
	// most once per the prober's TTL all the same. Default 2 s.
	Interval time.Duration
	// Bundle returns a tenant's secrets bundle, or nil when it is not
	// known (its machines are then left as they are).
	Bundle func(tenant string) []byte
	// OnMaintenance, when set, is called with a tenant one of whose
	// machines was just seen waiting in maintenance mode for its config,
	// once each time a machine enters it. It must not block for long.
	OnMaintenance func(tenant string)
	// AfterFirstPass, when set, is called once, after the first pass
	// through the fleet (which asks for every tenant's bundle).
	AfterFirstPass func()
}

// RunObserver keeps the status of machines, node groups and tenants in
// the store up to date with what the machines say, until ctx ends: every
// interval, and at once when a rollout's progress changes. Machine status
// comes from the probes (ObserveMachines); the tenants' and node groups'
// from it through status.Compute, with the Kubernetes API answering when a
// control plane runs kube-apiserver, and the Upgrading condition and
// status.rollout from the tenant's rollout record.
func (pl *Plane) RunObserver(ctx context.Context, opts ObserverOptions) {
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for first := true; ; first = false {
		if err := pl.observeOnce(ctx, opts); err != nil && ctx.Err() == nil {
			pl.log.Debug("observe machines", "err", err)
		}
		if first && opts.AfterFirstPass != nil && ctx.Err() == nil {
			opts.AfterFirstPass()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-pl.kick:
		}
	}
}

// ObserveOnce observes the machines once and writes what changed.
func (pl *Plane) ObserveOnce(ctx context.Context, bundle func(string) []byte) error {
	return pl.observeOnce(ctx, ObserverOptions{Bundle: bundle})
}

func (pl *Plane) observeOnce(ctx context.Context, opts ObserverOptions) error {
	obs, err := pl.ObserveMachines(ctx, opts.Bundle)
	if err != nil {
		return err
	}
	api := map[string]bool{}
	observed := map[string]bool{}
	waiting := map[string]bool{}
	for _, o := range obs {
		observed[o.Tenant] = true
		if o.EnteredMaintenance && opts.OnMaintenance != nil && !waiting[o.Tenant] {
			waiting[o.Tenant] = true
			pl.log.Info("a machine waits in maintenance mode", "tenant", o.Tenant, "machine", o.Key)
			opts.OnMaintenance(o.Tenant)
		}
		if o.Machine.ControlPlane && o.Obs.Connected && o.Obs.APIServerRunning {
			api[o.Tenant] = true
		}
	}
	return pl.writeTenants(observed, api)
}

// writeTenants recomputes the status of the observed tenants and their
// node groups, and writes those that changed: a read pass first, a write
// transaction only when something differs.
func (pl *Plane) writeTenants(observed, api map[string]bool) error {
	progress := map[string]Progress{}
	for tenant := range observed {
		if rec, found, err := pl.Rollout(tenant); err == nil && found {
			p := ProgressOf(rec)
			if rec.Current != nil {
				if o, ok := pl.prober.Last(rec.Current.Machine); ok {
					p.Stage = stageWord(o)
				}
			}
			progress[tenant] = p
		}
	}
	now := pl.opts.Now()
	pass := func(tx store.Tx, write bool) (bool, error) {
		changed := false
		for tenant := range observed {
			c, err := tenantStatus(tx, tenant, api[tenant], progress[tenant], now, write)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	}
	var changed bool
	err := pl.store.View(func(tx store.Tx) (err error) {
		changed, err = pass(tx, false)
		return err
	})
	if err != nil || !changed {
		return err
	}
	return pl.store.Update(func(tx store.Tx) error {
		_, err := pass(tx, true)
		return err
	})
}

// tenantStatus computes one tenant's status and its node groups', and
// reports whether any differs from the stored one; with write it stores
// them.
func tenantStatus(tx store.Tx, tenant string, apiAnswers bool, p Progress, now time.Time, write bool) (bool, error) {
	var t schema.Tenant
	if err := tx.GetObject(schema.KindTenant, tenant, &t); err != nil {
		return false, nil // not recorded yet, or gone
	}
	ngs, err := store.DecodeTenantObjects[schema.NodeGroup](tx, tenant, schema.KindNodeGroup)
	var machines []*schema.Machine
	if err == nil {
		machines, err = store.DecodeTenantObjects[schema.Machine](tx, tenant, schema.KindMachine)
	}
	if err != nil {
		return false, fmt.Errorf("tenant %s: %w", tenant, err)
	}
	st := status.Compute(status.Tenant{Status: t.Status, Generation: t.Metadata.Generation, NodeGroups: ngs,
		Machines: machines, APIAnswers: apiAnswers}, now)
	st.Tenant.Conditions = st.Tenant.Conditions.Set(UpgradingCondition(p, ""), now)
	st.Tenant.Rollout = p.Status(machines)
	changed := false
	if !sameJSON(st.Tenant, t.Status) {
		changed = true
		t.Status = st.Tenant
		if write {
			if _, err := tx.PutObject(schema.KindTenant, tenant, &t); err != nil {
				return false, err
			}
		}
	}
	for _, ng := range ngs {
		gs := st.NodeGroups[ng.Metadata.Name]
		gs.Conditions = gs.Conditions.Set(UpgradingCondition(p, ng.Metadata.Name), now)
		if sameJSON(gs, ng.Status) {
			continue
		}
		changed = true
		ng.Status = gs
		if write {
			if _, err := tx.PutObject(schema.KindNodeGroup, tenant+"/"+ng.Metadata.Name, ng); err != nil {
				return false, err
			}
		}
	}
	return changed, nil
}

// UpgradingCondition is the Upgrading condition a rollout's progress
// gives a tenant (group ""), or one of its node groups: True while
// machines remain to be changed, with machine n of N and the current
// machine's stage; False when the rollout stopped at a failed machine,
// which it names, or when all is done.
func UpgradingCondition(p Progress, group string) schema.Condition {
	c := schema.Condition{Type: schema.ConditionUpgrading, Status: schema.ConditionFalse, Reason: schema.ReasonUpToDate,
		Message: "every machine runs its node group's config and Talos version"}
	g, inGroup := p.Groups[group]
	switch {
	case p.Failed != nil && (group == "" || p.Failed.NodeGroup == group):
		c.Reason, c.Message = schema.ReasonRolloutFailed, p.Message()
	case p.Active && group == "":
		c.Status, c.Reason, c.Message = schema.ConditionTrue, schema.ReasonRollingOut, p.Message()
	case p.Active && inGroup && g.Finished < g.Total:
		c.Status, c.Reason = schema.ConditionTrue, schema.ReasonRollingOut
		c.Message = fmt.Sprintf("rolling out: %d of %d machines of the node group done", g.Finished, g.Total)
		if p.NodeGroup == group && p.Machine != "" {
			c.Message += fmt.Sprintf("; now %s (%s)", p.Machine, p.Op)
		}
	}
	return c
}

// sameJSON reports whether a and b are stored as the same JSON.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
