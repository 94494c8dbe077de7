package talos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// start records the operation a machine needs, then asks the machine for
// it. A call the machine refuses changes nothing and gives a
// *WaitingError: the next Roll tries again.
func (pl *Plane) start(ctx context.Context, d Desired, rec *RolloutRecord, w work) error {
	g := rec.Groups[w.m.NodeGroup]
	op := &Operation{
		Machine: w.m.ID, Name: w.m.Name, Address: w.m.Address, NodeGroup: w.m.NodeGroup, ControlPlane: w.m.ControlPlane,
		Op: w.op, FromVersion: w.obs.TalosVersion, StartedAt: pl.opts.Now(), Drain: w.drain,
	}
	switch w.op {
	case OpApply:
		op.ConfigSHA256 = rec.configSHA256(w.m)
	case OpUpgrade:
		op.ToVersion = g.TalosVersion
	}
	op.RestartKey = restartKey(rec, d, w.m)
	op.Lifecycle = w.lifecycleWork()
	rec.Current, rec.UpdatedAt = op, pl.opts.Now()
	if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
		return err
	}
	pl.log.Info("rollout", "tenant", d.Tenant, "machine", w.m.ID, "op", w.op, "to", op.ToVersion+op.ConfigSHA256)
	if op.Lifecycle {
		return pl.install(ctx, d, rec)
	}
	return pl.issue(ctx, d, rec)
}

// issue makes the call of the current operation and records that the
// machine acknowledged it.
func (pl *Plane) issue(ctx context.Context, d Desired, rec *RolloutRecord) error {
	op := rec.Current
	m := Machine{ID: op.Machine, Name: op.Name, Address: op.Address, NodeGroup: op.NodeGroup, ControlPlane: op.ControlPlane}
	err := pl.disrupt(ctx, d.Tenant, d.Bundle, m, func(ctx context.Context, c *client.Client) error {
		switch op.Op {
		case OpApply:
			cfg := d.configFor(m)
			if sha256Hex(cfg) != op.ConfigSHA256 {
				return fmt.Errorf("the config to apply changed meanwhile")
			}
			resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO})
			if err == nil && len(resp.GetMessages()) > 0 {
				op.Mode = strings.ToLower(resp.GetMessages()[0].GetMode().String())
			}
			return err
		case OpUpgrade:
			if op.Lifecycle { // installed already
				return c.Reboot(ctx)
			}
			_, err := c.Upgrade(ctx, pl.InstallerImage(op.ToVersion), false, false) //nolint:staticcheck // the path of Talos before 1.13
			return err
		case OpReboot:
			return c.Reboot(ctx)
		}
		return fmt.Errorf("unknown operation %q", op.Op)
	})
	switch {
	case err != nil && mayHaveArrived(err):
		// The connection broke after the call was sent, as it does when
		// the machine goes down for it: count it as made, and let finish
		// see the machine come back. Making it again could reboot the
		// machine twice.
		pl.log.Info("the answer to a call was lost", "tenant", d.Tenant, "machine", m.ID, "op", op.Op, "err", err)
	case err != nil:
		rec.Current = nil
		if serr := pl.save(KindRollout, d.Tenant, rec); serr != nil {
			return serr
		}
		return &WaitingError{Tenant: d.Tenant, Machine: m.label(), Reason: fmt.Sprintf("%s was refused: %v", op.Op, err)}
	}
	op.Issued, op.IssuedAt, op.here = true, pl.opts.Now(), true
	if op.Lifecycle {
		op.Phase = PhaseRebooted
	}
	rec.UpdatedAt = op.IssuedAt
	if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
		return err
	}
	pl.report(rec, nil)
	return nil
}

// mayHaveArrived reports whether a failed call may have reached the
// machine: the connection broke while the call was under way, rather
// than before it was made (no connection could be dialed).
func mayHaveArrived(err error) bool {
	return status.Code(err) == codes.Unavailable && !strings.Contains(err.Error(), "while dialing")
}

// finish follows the current operation until its machine is back and
// ready (the operation is done), or fails. An operation that was recorded
// but maybe never reached the machine (the server stopped in between) is
// made now unless the machine shows that it got it. A finished operation
// is counted in done.
func (pl *Plane) finish(ctx context.Context, d Desired, rec *RolloutRecord, done *Rolled) error {
	op := rec.Current
	m, ok := machineByID(d, op.Machine)
	if !ok { // the machine is gone: nothing left to finish
		rec.Current = nil
		return pl.save(KindRollout, d.Tenant, rec)
	}
	resumed := !op.here
	if !op.Issued {
		if op.Lifecycle && op.Phase == "" { // the install did not finish
			return pl.install(ctx, d, rec)
		}
		o := pl.prober.Fresh(ctx, d.Tenant, d.Bundle, m)
		if !gotIt(op, o) {
			if op.Lifecycle {
				return pl.drainAndReboot(ctx, d, rec, m)
			}
			return pl.issue(ctx, d, rec)
		}
		op.Issued, op.IssuedAt = true, op.StartedAt
		if op.Lifecycle {
			op.Phase = PhaseRebooted
		}
	}
	deadline := op.IssuedAt.Add(pl.opts.Timeout)
	for {
		o := pl.prober.Fresh(ctx, d.Tenant, d.Bundle, m)
		if !op.WentDown && (!o.Connected || o.Busy()) {
			op.WentDown = true
			if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
				return err
			}
		}
		v := verdict(op, o, resumed)
		back, why, err := pl.gatesOpen(ctx, d, rec, m, v)
		if err != nil {
			return err
		}
		pl.reportWaiting(rec, &o, why)
		switch {
		case back:
			done.add(op)
			return pl.done(d, rec)
		case v == verdictFailed:
			return pl.fail(ctx, d, rec, m, "came back with "+describe(o))
		case !pl.opts.Now().Before(deadline) && why != "":
			return pl.fail(ctx, d, rec, m, fmt.Sprintf("back, but waited %s for %s", pl.opts.Timeout, why))
		case !pl.opts.Now().Before(deadline):
			return pl.fail(ctx, d, rec, m, fmt.Sprintf("not back within %s: %s", pl.opts.Timeout, describe(o)))
		}
		resumed = false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pl.opts.Poll):
		}
	}
}

// gotIt reports whether a machine shows that the call of op reached it.
func gotIt(op *Operation, o Observation) bool {
	switch op.Op {
	case OpApply:
		return o.ConfigSHA256 == op.ConfigSHA256 || o.Busy()
	case OpUpgrade:
		return o.TalosVersion == op.ToVersion || o.Busy() || !o.Connected
	}
	return o.Busy() || !o.Connected
}

type verdictKind int

const (
	verdictWait verdictKind = iota
	verdictDone
	verdictFailed
)

// verdict judges an operation by one observation of its machine. resumed
// is set for the first observation after a restart of the server, which
// may have missed the reboot.
func verdict(op *Operation, o Observation, resumed bool) verdictKind {
	if !o.Connected || o.Busy() {
		return verdictWait
	}
	switch op.Op {
	case OpApply:
		if o.ConfigSHA256 == op.ConfigSHA256 && o.Ready {
			return verdictDone
		}
	case OpUpgrade:
		switch {
		case o.TalosVersion == op.ToVersion && o.Ready:
			return verdictDone
		case op.WentDown && o.TalosVersion != op.ToVersion:
			return verdictFailed // the boot loader fell back to the old version
		}
	case OpReboot:
		if (op.WentDown || resumed) && o.Ready {
			return verdictDone
		}
	}
	return verdictWait
}

// done records a finished operation. Its machine counts as finished at
// once, so that the progress the record shows moves on to the next
// machine (the next plan puts it back if it needs another operation).
func (pl *Plane) done(d Desired, rec *RolloutRecord) error {
	op := rec.Current
	rebooted := op.Op == OpUpgrade || op.Op == OpReboot || op.Mode == "reboot"
	if rebooted && op.RestartKey != "" {
		if rec.Restarted == nil {
			rec.Restarted = map[string]string{}
		}
		rec.Restarted[op.Machine] = op.RestartKey
	}
	if _, ok := rec.Touched[op.Machine]; ok {
		if rec.Finished == nil {
			rec.Finished = map[string]bool{}
		}
		rec.Finished[op.Machine] = true
	}
	rec.Current, rec.UpdatedAt = nil, pl.opts.Now()
	return pl.save(KindRollout, d.Tenant, rec)
}

// fail stops the rollout at the current machine: an upgrade is rolled
// back first.
func (pl *Plane) fail(ctx context.Context, d Desired, rec *RolloutRecord, m Machine, why string) error {
	op := rec.Current
	f := &Failure{Generation: rec.Generation, Machine: m.ID, Name: m.Name, NodeGroup: m.NodeGroup, Op: op.Op, At: pl.opts.Now()}
	switch op.Op {
	case OpUpgrade:
		f.Reason = fmt.Sprintf("upgrade from %s to %s: %s", op.FromVersion, op.ToVersion, why)
		if err := pl.rollback(ctx, d, m); err != nil {
			f.Reason += "; rollback failed: " + err.Error()
		} else {
			f.RolledBack = true
			f.Reason += "; rolled back to " + op.FromVersion
		}
	case OpApply:
		f.Reason = fmt.Sprintf("config %.12s applied (%s): %s", op.ConfigSHA256, op.Mode, why)
	default:
		f.Reason = "reboot: " + why
	}
	pl.log.Warn("rollout stopped", "tenant", d.Tenant, "machine", m.ID, "reason", f.Reason)
	rec.Current, rec.Failed, rec.UpdatedAt = nil, f, pl.opts.Now()
	if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
		return err
	}
	pl.report(rec, nil)
	return &StoppedError{Tenant: d.Tenant, Machine: m.label(), Op: op.Op, Reason: f.Reason}
}

// rollback asks a machine to boot its previous Talos version, retrying
// while it does not answer, for up to Options.Wait.
func (pl *Plane) rollback(ctx context.Context, d Desired, m Machine) error {
	deadline := pl.opts.Now().Add(pl.opts.Wait)
	for {
		err := pl.disrupt(ctx, d.Tenant, d.Bundle, m, func(ctx context.Context, c *client.Client) error { return c.Rollback(ctx) })
		if err == nil || !unreachable(err) || !pl.opts.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pl.opts.Poll):
		}
	}
}

// disrupt makes call, which disrupts m or its cluster, with a client of
// m, once the gate (Options.Gate) allows it: it is asked after the
// connection is up, right before the call.
func (pl *Plane) disrupt(ctx context.Context, tenant string, bundle []byte, m Machine, call func(context.Context, *client.Client) error) error {
	return pl.withClient(ctx, tenant, bundle, m, func(ctx context.Context, c *client.Client) error {
		if pl.opts.Gate != nil {
			if err := pl.opts.Gate(); err != nil {
				return fmt.Errorf("not called: %w", err)
			}
		}
		return call(ctx, c)
	})
}
