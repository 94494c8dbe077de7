package talos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// BootstrapRecord is what the store keeps of a tenant's bootstrap.
type BootstrapRecord struct {
	Tenant string `json:"tenant"`
	// Machine is the control plane chosen: Bootstrap is never called on
	// another machine of the tenant once this is set.
	Machine string `json:"machine"`
	Address string `json:"address"`
	// Done is set once the tenant has an etcd cluster: the call succeeded,
	// or a control plane already had members (Adopted).
	Done    bool `json:"done"`
	Adopted bool `json:"adopted,omitempty"`
	// Recovery is the backup a restore brings the cluster back from
	// (Plane.Restore), on Machine: while it is not Done, Bootstrap leaves
	// the cluster to the restore.
	Recovery  string    `json:"recovery,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	DoneAt    time.Time `json:"doneAt,omitzero"`
}

// Bootstrapped returns the tenant's bootstrap record, and whether there is
// one.
func (pl *Plane) Bootstrapped(tenant string) (BootstrapRecord, bool, error) {
	var rec BootstrapRecord
	found, err := pl.load(KindBootstrap, tenant, &rec)
	return rec, found, err
}

// Bootstrap makes sure the tenant's etcd cluster exists, bootstrapping it
// exactly once: on the first control plane by stable order (Order), once
// that machine runs and its etcd waits for a bootstrap. Before the call it
// asks every control plane for its etcd membership and adopts a cluster
// that exists instead. It records the machine it chose before calling
// Bootstrap and that it is done after, so that a crash in between never
// leads to a second cluster: after a restart only that machine is asked
// again. It waits up to Options.Wait, then returns a *WaitingError.
//
// A tenant whose etcd a restore is bringing back (Plane.Restore) is left
// to it: Bootstrap returns the record as it is, and calls nothing.
//
// A tenant whose bootstrapped machine is gone (its control planes were
// replaced, as a commit with the Rezuscloud-Allow-Replace trailer may)
// gets a new cluster the same way, once every control plane it has now
// says that it has none.
func (pl *Plane) Bootstrap(ctx context.Context, tenant string, bundle []byte, ms []Machine) (BootstrapRecord, error) {
	var rec BootstrapRecord
	if _, err := pl.load(KindBootstrap, tenant, &rec); err != nil {
		return rec, err
	}
	cps := controlPlanes(ms)
	if len(cps) == 0 || (rec.Recovery != "" && !rec.Done) {
		return rec, nil
	}
	if rec.Done {
		if slices.ContainsFunc(cps, func(m Machine) bool { return m.ID == rec.Machine }) {
			return rec, nil
		}
		pl.log.Info("the bootstrapped control plane is gone", "tenant", tenant, "machine", rec.Machine)
		rec = BootstrapRecord{}
	}
	deadline := pl.opts.Now().Add(pl.opts.Wait)
	for {
		done, waitFor, err := pl.bootstrapOnce(ctx, tenant, bundle, cps, &rec)
		if done || err != nil {
			return rec, err
		}
		if !pl.opts.Now().Before(deadline) {
			return rec, waitFor
		}
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-time.After(pl.opts.Poll):
		}
	}
}

// bootstrapOnce makes one attempt. It returns done when the tenant has
// its cluster, or why it must wait.
func (pl *Plane) bootstrapOnce(ctx context.Context, tenant string, bundle []byte, cps []Machine, rec *BootstrapRecord) (done bool, waitFor *WaitingError, err error) {
	exists, waitFor := pl.clusterExists(ctx, tenant, bundle, cps)
	if waitFor != nil {
		return false, waitFor, nil
	}
	target := cps[0]
	for _, m := range cps {
		if rec.Machine != "" && m.ID == rec.Machine {
			target = m // a bootstrap began there: never another machine
		}
	}
	if exists {
		rec.Tenant, rec.Done, rec.DoneAt = tenant, true, pl.opts.Now()
		if rec.Machine == "" {
			rec.Adopted, rec.Machine, rec.Address = true, target.ID, target.Address
		}
		return true, nil, pl.save(KindBootstrap, tenant, rec)
	}
	obs := pl.prober.Fresh(ctx, tenant, bundle, target)
	if !obs.Connected || obs.TalosStage != "running" || !obs.EtcdPreparing {
		return false, &WaitingError{Tenant: tenant, Machine: target.label(), Reason: "to be ready for the etcd bootstrap: " + describe(obs)}, nil
	}
	if rec.Machine != target.ID {
		*rec = BootstrapRecord{Tenant: tenant, Machine: target.ID, Address: target.Address, StartedAt: pl.opts.Now()}
		if err := pl.save(KindBootstrap, tenant, rec); err != nil {
			return false, nil, err
		}
	}
	err = pl.disrupt(ctx, tenant, bundle, target, func(ctx context.Context, c *client.Client) error {
		return c.Bootstrap(ctx, &machine.BootstrapRequest{})
	})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return false, &WaitingError{Tenant: tenant, Machine: target.label(), Reason: "bootstrap: " + err.Error()}, nil
	}
	pl.log.Info("bootstrapped etcd", "tenant", tenant, "machine", target.ID)
	rec.Done, rec.DoneAt = true, pl.opts.Now()
	return true, nil, pl.save(KindBootstrap, tenant, rec)
}

// clusterExists asks every control plane for etcd members. It needs an
// answer from each: a machine that cannot be asked might be the one
// member, so the caller must wait.
func (pl *Plane) clusterExists(ctx context.Context, tenant string, bundle []byte, cps []Machine) (bool, *WaitingError) {
	answers := make([]etcdAnswer, len(cps))
	pl.each(cps, func(i int, m Machine) {
		_ = pl.withClient(ctx, tenant, bundle, m, func(ctx context.Context, c *client.Client) error {
			answers[i] = etcdMembers(ctx, c)
			return nil
		})
	})
	for i, a := range answers {
		if len(a.Members) > 0 {
			return true, nil
		}
		if a.Err != nil || (!a.NoCluster && len(a.Members) == 0) {
			why := "no answer"
			if a.Err != nil {
				why = a.Err.Error()
			}
			return false, &WaitingError{Tenant: tenant, Machine: cps[i].label(), Reason: "to tell its etcd membership before the bootstrap: " + why}
		}
	}
	return false, nil
}

// withClient runs fn with a client of m, bounded by CallTimeout.
func (pl *Plane) withClient(ctx context.Context, tenant string, bundle []byte, m Machine, fn func(context.Context, *client.Client) error) error {
	return pl.withClientFor(ctx, pl.opts.CallTimeout, tenant, bundle, m, fn)
}

// withClientFor is withClient with a bound of its own, for a call that
// takes long (an install).
func (pl *Plane) withClientFor(ctx context.Context, timeout time.Duration, tenant string, bundle []byte, m Machine, fn func(context.Context, *client.Client) error) error {
	c, release, err := pl.pool.Client(tenant, bundle, m.Address)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return pl.scrubbed(tenant, fn(ctx, c))
}

// each calls fn for every machine in parallel and waits.
func (pl *Plane) each(ms []Machine, fn func(int, Machine)) {
	done := make(chan struct{}, len(ms))
	for i, m := range ms {
		go func() {
			defer func() { done <- struct{}{} }()
			fn(i, m)
		}()
	}
	for range ms {
		<-done
	}
}

// describe says in a few words how a machine is, for messages.
func describe(o Observation) string {
	if !o.Connected {
		if o.Error == "" {
			return "not connected"
		}
		return "not connected: " + o.Error
	}
	s := fmt.Sprintf("stage %s", o.TalosStage)
	if !o.Ready {
		s += ", not ready"
		if len(o.Unmet) > 0 {
			s += " (" + strings.Join(o.Unmet, "; ") + ")"
		}
	}
	if o.TalosVersion != "" {
		s += ", Talos " + o.TalosVersion
	}
	if o.Error != "" {
		s += "; " + o.Error
	}
	return s
}
