package talos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/store"
)

// The phases of a restore, in order. Each is recorded before the calls
// it makes.
const (
	// RestoreWiping: every control plane is brought to a state without
	// etcd data (Reset of EPHEMERAL, not graceful, with a reboot).
	RestoreWiping = "wiping"
	// RestoreRecovering: the snapshot is uploaded with EtcdRecover to the
	// control plane that recovers.
	RestoreRecovering = "recovering"
	// RestoreBootstrapping: that control plane is bootstrapped with
	// RecoverEtcd.
	RestoreBootstrapping = "bootstrapping"
	// RestoreJoining: the other control planes join, and etcd becomes
	// healthy.
	RestoreJoining = "joining"
	// RestoreKubelets: the workers' kubelets are restarted.
	RestoreKubelets = "kubelets"
	// RestoreDone: the cluster runs on the restored data.
	RestoreDone = "done"
)

// restorePhases are the phases that make calls, in order.
var restorePhases = []string{RestoreWiping, RestoreRecovering, RestoreBootstrapping, RestoreJoining, RestoreKubelets}

// RestoreRecord is what the store keeps of a tenant's restore (kind
// KindRestore, by tenant). It is written before each phase's calls.
type RestoreRecord struct {
	// Value is the backup restored (spec.restore.backup): a restore runs
	// once per value.
	Value string `json:"value"`
	// Phase is where the restore stands (RestoreWiping … RestoreDone);
	// empty before it began.
	Phase string `json:"phase,omitempty"`
	// Machine is the control plane that recovers: the first by stable
	// order when the restore began.
	Machine string `json:"machine,omitempty"`
	// PreSnapshot is the ID of the snapshot taken before the restore,
	// when one could be taken (NotePreSnapshot).
	PreSnapshot string    `json:"preSnapshot,omitempty"`
	StartedAt   time.Time `json:"startedAt,omitzero"`
	FinishedAt  time.Time `json:"finishedAt,omitzero"`
	// Error is why the last call of Restore stopped, if it did.
	Error string `json:"error,omitempty"`
}

// Restored returns the tenant's restore record, and whether there is one.
func (pl *Plane) Restored(tenant string) (RestoreRecord, bool, error) {
	var rec RestoreRecord
	found, err := pl.load(KindRestore, tenant, &rec)
	return rec, found, err
}

// NotePreSnapshot records id as the snapshot taken before the restore of
// value, for a restore of value that has not begun yet; it changes
// nothing of one that has.
func (pl *Plane) NotePreSnapshot(tenant, value, id string) error {
	rec, _, err := pl.Restored(tenant)
	if err != nil {
		return err
	}
	if rec.Value == value && rec.Phase != "" {
		return nil
	}
	return pl.save(KindRestore, tenant, RestoreRecord{Value: value, PreSnapshot: id})
}

// Restore brings the tenant's etcd back from a snapshot, once per value:
// it brings every control plane to a state without etcd data (Reset of
// EPHEMERAL, not graceful, with a reboot: the machine keeps its config),
// uploads the snapshot with EtcdRecover to the first control plane by
// stable order, bootstraps that one with RecoverEtcd, waits for the other
// control planes to join and etcd to be healthy, and restarts the
// workers' kubelets, whose watches still know the lost cluster.
//
// Each phase is recorded before its calls, and a Restore after a restart
// of the server goes on from the recorded phase. Bootstrap is never
// called while a control plane is an etcd member: a cluster found after
// the bootstrap was recorded is the restored one. snapshot opens the
// snapshot's stream; it may be called more than once (again after a
// resume). The tenant's BootstrapRecord says that the cluster is brought
// back by this restore (Recovery), so that Bootstrap leaves it to it.
//
// A restore of value that is done returns its record and does nothing. A
// phase that cannot go on for a passing reason gives a *WaitingError
// after Options.Wait (Options.Timeout for the wipe, which reboots the
// machines); the next call goes on from there.
func (pl *Plane) Restore(ctx context.Context, tenant string, bundle []byte, ms []Machine, value string,
	snapshot func(context.Context) (io.ReadCloser, error)) (RestoreRecord, error) {
	var rec RestoreRecord
	if _, err := pl.load(KindRestore, tenant, &rec); err != nil {
		return rec, err
	}
	if rec.Value == value && rec.Phase == RestoreDone {
		return rec, nil
	}
	cps := controlPlanes(ms)
	if len(cps) == 0 {
		return rec, &WaitingError{Tenant: tenant, Reason: "a control plane to restore etcd onto: the tenant has none"}
	}
	resumed := rec.Phase
	if rec.Value != value || rec.Phase == "" {
		resumed = ""
		pre := ""
		if rec.Value == value {
			pre = rec.PreSnapshot
		}
		rec = RestoreRecord{Value: value, Phase: RestoreWiping, Machine: cps[0].ID, PreSnapshot: pre, StartedAt: pl.opts.Now()}
		pl.log.Info("restore of etcd", "tenant", tenant, "backup", value, "machine", cps[0].ID)
	}
	r := &restoreRun{pl: pl, tenant: tenant, bundle: bundle, ms: ms, cps: cps, snapshot: snapshot, rec: &rec, resumed: resumed}
	err := r.run(ctx)
	if err != nil && ctx.Err() == nil {
		rec.Error = err.Error()
		if serr := r.save(); serr != nil {
			return rec, serr
		}
	}
	return rec, err
}

// restoreRun is one call of Restore.
type restoreRun struct {
	pl       *Plane
	tenant   string
	bundle   []byte
	ms, cps  []Machine
	snapshot func(context.Context) (io.ReadCloser, error)
	rec      *RestoreRecord
	// resumed is the phase the record held when the call began.
	resumed string
}

// run goes through the phases from the recorded one.
func (r *restoreRun) run(ctx context.Context) error {
	r.pickTarget()
	for r.rec.Phase != RestoreDone {
		if err := r.save(); err != nil {
			return err
		}
		next, err := r.step(ctx, r.rec.Phase)
		if err != nil {
			return err
		}
		r.rec.Phase, r.rec.Error = next, ""
	}
	r.rec.FinishedAt = r.pl.opts.Now()
	r.pl.log.Info("restored etcd", "tenant", r.tenant, "backup", r.rec.Value, "machine", r.rec.Machine)
	return r.save()
}

// step runs one phase and returns the phase that comes next.
func (r *restoreRun) step(ctx context.Context, phase string) (string, error) {
	switch phase {
	case RestoreWiping:
		return RestoreRecovering, r.wipe(ctx)
	case RestoreRecovering:
		return RestoreBootstrapping, r.recover(ctx)
	case RestoreBootstrapping:
		return r.bootstrap(ctx)
	case RestoreJoining:
		return RestoreKubelets, r.join(ctx)
	case RestoreKubelets:
		return RestoreDone, r.kubelets(ctx)
	}
	return "", fmt.Errorf("tenant %s: restore record has an unknown phase %q", r.tenant, phase)
}

// pickTarget keeps the recorded control plane that recovers while the
// tenant has it; when it is gone, the first control plane takes its
// place, and gets the snapshot again if the bootstrap was next.
func (r *restoreRun) pickTarget() {
	if slices.ContainsFunc(r.cps, func(m Machine) bool { return m.ID == r.rec.Machine }) {
		return
	}
	r.rec.Machine = r.cps[0].ID
	if r.rec.Phase == RestoreBootstrapping {
		r.rec.Phase = RestoreRecovering
	}
}

func (r *restoreRun) target() Machine {
	for _, m := range r.cps {
		if m.ID == r.rec.Machine {
			return m
		}
	}
	return r.cps[0]
}

// save writes the restore record and, in the same transaction, the
// tenant's bootstrap record, which says that this restore brings the
// cluster back.
func (r *restoreRun) save() error {
	t := r.target()
	boot := BootstrapRecord{Tenant: r.tenant, Machine: t.ID, Address: t.Address, Recovery: r.rec.Value, StartedAt: r.rec.StartedAt}
	if r.rec.Phase == RestoreDone {
		boot.Done, boot.DoneAt = true, r.rec.FinishedAt
	}
	recB, err := json.Marshal(r.rec)
	if err != nil {
		return err
	}
	bootB, err := json.Marshal(boot)
	if err != nil {
		return err
	}
	err = r.pl.store.Update(func(tx store.Tx) error {
		if _, err := tx.Put(KindRestore, r.tenant, recB); err != nil {
			return err
		}
		_, err := tx.Put(KindBootstrap, r.tenant, bootB)
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s record of %s: %w", KindRestore, r.tenant, err)
	}
	return nil
}

// poll calls try until it reports nothing to wait for, or until timeout
// has passed: then it gives a *WaitingError with try's last reason.
func (r *restoreRun) poll(ctx context.Context, timeout time.Duration, try func() (why string, err error)) error {
	deadline := r.pl.opts.Now().Add(timeout)
	for {
		why, err := try()
		if why == "" || err != nil {
			return err
		}
		if !r.pl.opts.Now().Before(deadline) {
			return &WaitingError{Tenant: r.tenant, Reason: fmt.Sprintf("restore of %s, %s: %s", r.rec.Value, r.rec.Phase, why)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.pl.opts.Poll):
		}
	}
}

// wipe resets every control plane that may hold etcd data, all at once
// (one left with data would let the others join it again as they come
// back), and waits until each runs and waits for a bootstrap. A machine
// is reset once per call: one that shows data again afterwards is
// waited for, and reset again by the next call.
func (r *restoreRun) wipe(ctx context.Context) error {
	reset := map[string]bool{}
	return r.poll(ctx, r.pl.opts.Timeout, func() (string, error) {
		obs := make([]Observation, len(r.cps))
		r.pl.each(r.cps, func(i int, m Machine) { obs[i] = r.pl.prober.Fresh(ctx, r.tenant, r.bundle, m) })
		var toReset []Machine
		var waiting []string
		for i, m := range r.cps {
			o := obs[i]
			switch {
			case !o.Connected || o.TalosStage != "running":
				waiting = append(waiting, m.label()+": "+describe(o))
			case withoutEtcdData(o):
			case !mayHoldEtcdData(o):
				waiting = append(waiting, m.label()+": etcd is "+etcdServiceState(o))
			case reset[m.ID]:
				waiting = append(waiting, m.label()+": reset, but not begun yet")
			default:
				toReset = append(toReset, m)
			}
		}
		errs := make([]error, len(toReset))
		r.pl.each(toReset, func(i int, m Machine) { errs[i] = r.reset(ctx, m) })
		for i, m := range toReset {
			if errs[i] != nil {
				waiting = append(waiting, m.label()+": "+callError("Reset", errs[i]))
				continue
			}
			reset[m.ID] = true
			waiting = append(waiting, m.label()+": reset")
		}
		return strings.Join(waiting, "; "), nil
	})
}

// withoutEtcdData reports whether a running control plane has no etcd
// data: it is no member, and its etcd waits for a bootstrap (Preparing:
// etcd starts at once on data of its own).
func withoutEtcdData(o Observation) bool {
	return o.EtcdPreparing && (o.Etcd == nil || !o.Etcd.Member)
}

// mayHoldEtcdData reports whether a running control plane that is not
// withoutEtcdData needs a wipe: it is a member, or its etcd got past
// waiting for the services it needs (it runs, or failed on its data).
func mayHoldEtcdData(o Observation) bool {
	st := etcdServiceState(o)
	return (o.Etcd != nil && o.Etcd.Member) || (st != "Waiting" && st != "not listed")
}

// etcdServiceState is the state of the etcd service of an observation.
func etcdServiceState(o Observation) string {
	for _, s := range o.Services {
		if s.Name == "etcd" {
			return s.State
		}
	}
	return "not listed"
}

// reset wipes m's EPHEMERAL partition, where etcd's data are, and reboots
// it; it keeps its config. Not graceful: a member cannot leave a cluster
// that lost its quorum. A call whose answer was lost counts as made.
func (r *restoreRun) reset(ctx context.Context, m Machine) error {
	r.pl.log.Info("restore: reset", "tenant", r.tenant, "machine", m.ID)
	err := r.pl.disrupt(ctx, r.tenant, r.bundle, m, func(ctx context.Context, c *client.Client) error {
		return c.ResetGeneric(ctx, &machine.ResetRequest{
			Graceful: false, Reboot: true,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: constants.EphemeralPartitionLabel, Wipe: true}},
		})
	})
	if err != nil && mayHaveArrived(err) {
		return nil
	}
	return err
}

// recover uploads the snapshot to the control plane that recovers, once
// it runs and waits for a bootstrap. A snapshot the machine refuses as
// invalid, or one that cannot be read, stops the restore with an error.
func (r *restoreRun) recover(ctx context.Context) error {
	m := r.target()
	return r.poll(ctx, r.pl.opts.Wait, func() (string, error) {
		if why := r.readyToBootstrap(ctx, m); why != "" {
			return why, nil
		}
		err := r.upload(ctx, m)
		var refused *snapshotRefused
		switch {
		case err == nil:
			r.pl.log.Info("restore: snapshot uploaded", "tenant", r.tenant, "machine", m.ID)
			return "", nil
		case errors.As(err, &refused), ctx.Err() != nil:
			return "", err
		}
		return m.label() + ": " + callError("EtcdRecover", err), nil
	})
}

// snapshotRefused is a snapshot that cannot be uploaded: it cannot be
// read, or the machine says it is not valid.
type snapshotRefused struct{ err error }

func (e *snapshotRefused) Error() string { return e.err.Error() }
func (e *snapshotRefused) Unwrap() error { return e.err }

// upload streams the snapshot with EtcdRecover on a connection of its
// own, within Options.Timeout.
func (r *restoreRun) upload(ctx context.Context, m Machine) error {
	snap, err := r.snapshot(ctx)
	if err != nil {
		return &snapshotRefused{fmt.Errorf("open the snapshot of %s: %w", r.rec.Value, err)}
	}
	defer snap.Close()
	c, closeConn, err := r.pl.pool.Admin(r.tenant, r.bundle, m.Address)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, r.pl.opts.Timeout)
	defer cancel()
	src := &readErr{r: snap}
	_, err = c.EtcdRecover(ctx, src)
	switch {
	case src.err != nil:
		return &snapshotRefused{fmt.Errorf("read the snapshot of %s: %w", r.rec.Value, src.err)}
	case status.Code(err) == codes.InvalidArgument:
		return &snapshotRefused{fmt.Errorf("%s refused the snapshot of %s: %s", m.label(), r.rec.Value, callError("EtcdRecover", err))}
	}
	return err
}

// readErr keeps the error of a reader other than io.EOF.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

// readyToBootstrap says what m waits for before it can take a snapshot
// and a bootstrap: "" once it runs and its etcd waits for a bootstrap.
func (r *restoreRun) readyToBootstrap(ctx context.Context, m Machine) string {
	o := r.pl.prober.Fresh(ctx, r.tenant, r.bundle, m)
	if !o.Connected || o.TalosStage != "running" || !o.EtcdPreparing {
		return m.label() + " to be ready for the etcd bootstrap: " + describe(o)
	}
	return ""
}

// bootstrap bootstraps the control plane that recovers with RecoverEtcd,
// after asking every control plane for its etcd membership. A cluster
// found when the phase was recorded before this call (the call may have
// been made) is the restored one; one found otherwise is not, and stops
// the restore. A machine that has no snapshot (it rebooted since the
// upload) sends the restore back to recovering.
func (r *restoreRun) bootstrap(ctx context.Context) (string, error) {
	m, next := r.target(), RestoreJoining
	called := r.resumed == RestoreBootstrapping
	err := r.poll(ctx, r.pl.opts.Wait, func() (string, error) {
		exists, waitFor := r.pl.clusterExists(ctx, r.tenant, r.bundle, r.cps)
		switch {
		case waitFor != nil:
			return waitFor.Machine + " " + waitFor.Reason, nil
		case exists && called:
			return "", nil
		case exists:
			return "", fmt.Errorf("tenant %s: restore of %s: a control plane is an etcd member already: the restore does not bootstrap over a cluster", r.tenant, r.rec.Value)
		}
		if why := r.readyToBootstrap(ctx, m); why != "" {
			return why, nil
		}
		err := r.pl.disrupt(ctx, r.tenant, r.bundle, m, func(ctx context.Context, c *client.Client) error {
			return c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true})
		})
		switch {
		case err == nil:
			r.pl.log.Info("restore: bootstrapped etcd from the snapshot", "tenant", r.tenant, "machine", m.ID)
			return "", nil
		case mayHaveArrived(err):
			called = true
			return m.label() + ": the answer to the bootstrap was lost", nil
		case noSnapshot(err):
			next = RestoreRecovering
			return "", nil
		}
		return m.label() + ": " + callError("Bootstrap", err), nil
	})
	return next, err
}

// noSnapshot reports whether a recovering bootstrap was refused for want
// of an uploaded snapshot.
func noSnapshot(err error) bool {
	return status.Code(err) != codes.AlreadyExists && strings.Contains(strings.ToLower(err.Error()), "snapshot")
}

// join waits until every control plane is an etcd member and every
// member is healthy.
func (r *restoreRun) join(ctx context.Context) error {
	d := Desired{Tenant: r.tenant, Bundle: r.bundle, Machines: r.cps}
	return r.poll(ctx, r.pl.opts.Wait, func() (string, error) {
		obs := make([]Observation, len(r.cps))
		r.pl.each(r.cps, func(i int, m Machine) { obs[i] = r.pl.prober.Fresh(ctx, r.tenant, r.bundle, m) })
		var missing []string
		for i, m := range r.cps {
			if o := obs[i]; o.Etcd == nil || !o.Etcd.Member {
				missing = append(missing, m.label()+" to join etcd: "+describe(o))
			}
		}
		if len(missing) > 0 {
			return strings.Join(missing, "; "), nil
		}
		if why := r.pl.etcdHealthy(ctx, d); why != "" {
			return "every etcd member to be healthy: " + why, nil
		}
		return "", nil
	})
}

// kubelets restarts the kubelet of every worker, each once per call.
func (r *restoreRun) kubelets(ctx context.Context) error {
	var workers []Machine
	for _, m := range r.ms {
		if !m.ControlPlane {
			workers = append(workers, m)
		}
	}
	Order(workers)
	restarted := map[string]bool{}
	return r.poll(ctx, r.pl.opts.Wait, func() (string, error) {
		errs := make([]error, len(workers))
		r.pl.each(workers, func(i int, m Machine) {
			if restarted[m.ID] {
				return
			}
			errs[i] = r.pl.disrupt(ctx, r.tenant, r.bundle, m, func(ctx context.Context, c *client.Client) error {
				_, err := c.ServiceRestart(ctx, "kubelet")
				return err
			})
		})
		var failed []string
		for i, m := range workers {
			if errs[i] != nil {
				failed = append(failed, m.label()+": "+callError("ServiceRestart kubelet", errs[i]))
			} else {
				restarted[m.ID] = true
			}
		}
		return strings.Join(failed, "; "), nil
	})
}
