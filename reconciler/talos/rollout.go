package talos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/window"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Operations a rollout makes on a machine.
const (
	OpApply   = "apply"   // ApplyConfiguration of the node group's config, mode auto
	OpUpgrade = "upgrade" // Upgrade to the installer of the node group's Talos version
	OpReboot  = "reboot"  // Reboot, for a restart declared with rezuscloud.io/restartedAt
)

// Desired is what a tenant's machines should run, as one commit renders it.
type Desired struct {
	Tenant string
	// Newer, when not nil, is closed once a newer revision waits to run
	// for the tenant: a drain before a disruption stops then (a
	// *SupersededError), rather than wait out its timeout for a revision
	// that no longer stands.
	Newer <-chan struct{}
	// Bundle is the tenant's secrets bundle.
	Bundle   []byte
	Machines []Machine
	// Groups are the node groups' targets, by node group name.
	Groups map[string]GroupTarget
	// Configs are the configs of machines that run one of their own
	// instead of their node group's, by machine id: a bare-metal
	// machine's is its group's with its host name and install disk. Held
	// in memory only; records keep their SHA-256.
	Configs map[string][]byte
	// RestartedAt is the Tenant's rezuscloud.io/restartedAt annotation.
	RestartedAt string
	// Suspended, when set, is asked before each machine's operation: true
	// stops the rollout there, between machines, with a *SuspendedError.
	Suspended func() bool
	// KubernetesVersion is the tenant's Kubernetes version.
	KubernetesVersion string
	// Windows are the tenant's maintenance windows: while none is open,
	// no disruptive operation starts (see window.go). Empty: any time.
	Windows window.Set
	// Endpoint is the tenant's controlPlaneEndpoint, where its Kubernetes
	// API is drained through.
	Endpoint string
	// Drains are the node groups' drain policies, by node group name.
	Drains map[string]schema.Drain
	// WaitFor is the tenant's spec.rollout.waitFor: a label selector of
	// the workloads that must be available before the next machine.
	WaitFor string
	// KubernetesStage renders the node groups' configs, by node group,
	// and the machines' own (Configs), with the Kubernetes components
	// from index next of rtalos.UpgradeOrder on held at version from: the
	// steps of an upgrade of Kubernetes (kubeupgrade.go). Nil: a change
	// of KubernetesVersion rolls as any change of config.
	KubernetesStage func(from string, next int) (groups, machines map[string][]byte, err error)
	// Snapshot, when set, takes a backup of the tenant's etcd before a
	// rolling upgrade of Talos or Kubernetes starts; the record of the
	// rollout names it. SnapshotRequired (the tenant declares backups)
	// holds the upgrade back while the snapshot fails.
	Snapshot         SnapshotGate
	SnapshotRequired bool
	// Scrub, when set, takes the tenant's secrets (values decrypted from
	// SOPS files, which its configs carry) out of what its machines
	// answer, before any of it reaches a record, a log line or an error.
	Scrub func(string) string

	// kubeUpgrade is the upgrade of Kubernetes whose step this is.
	kubeUpgrade *KubeUpgrade
}

// GroupTarget is what the machines of one node group should run.
type GroupTarget struct {
	// Config is the rendered machine config. It is held in memory only;
	// records keep its SHA-256.
	Config []byte
	// TalosVersion is the effective talosVersion ("1.12.6").
	TalosVersion string
	// RestartedAt is the NodeGroup's rezuscloud.io/restartedAt annotation.
	RestartedAt string
}

// GroupRecord is what the rollout record keeps of a node group's target.
type GroupRecord struct {
	ConfigSHA256 string `json:"configSHA256"`
	TalosVersion string `json:"talosVersion"`
	RestartedAt  string `json:"restartedAt,omitempty"`
	// Drain is the node group's drain policy when it is not the default:
	// a new one starts a new generation, so that a rollout a drain
	// stopped goes on with it.
	Drain string `json:"drain,omitempty"`
}

// RolloutRecord is the store's record of a tenant's rollout. It is written
// before each operation on a machine, so that after a restart the rollout
// resumes with that machine and never starts another one meanwhile.
type RolloutRecord struct {
	Tenant string `json:"tenant"`
	// Generation digests the targets; a new one starts a new rollout.
	Generation string                 `json:"generation"`
	Groups     map[string]GroupRecord `json:"groups"`
	// Machines are the config hashes of the machines that run a config
	// of their own (Desired.Configs), by machine id.
	Machines map[string]string `json:"machines,omitempty"`
	// Restarts are the restartedAt values whose restarts are complete:
	// the tenant's and each node group's. Restarted lists the machines
	// rebooted for the values now pending, with the value each got.
	Restarts  RestartValues     `json:"restarts"`
	Restarted map[string]string `json:"restarted,omitempty"`
	// KubernetesVersion is the Kubernetes version of the last completed
	// rollout (or of the machines when the plane first saw the tenant):
	// a rollout to another one restarts Kubernetes on every machine.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Kubernetes is the last upgrade of Kubernetes, under way or done.
	Kubernetes *KubeUpgrade `json:"kubernetes,omitempty"`
	// Touched are the machines this generation had to change, Finished
	// those it has changed: machine len(Finished)+1 of len(Touched) is
	// the one being worked on.
	Touched  map[string]string `json:"touched,omitempty"` // machine → node group
	Finished map[string]bool   `json:"finished,omitempty"`
	// Current is the operation in progress, if any.
	Current *Operation `json:"current,omitempty"`
	// Cordoned are the Kubernetes Nodes the rollout cordoned (written
	// before the cordon), by machine id, until it uncordons them: a
	// rollout resumed after a restart uncordons what it cordoned.
	Cordoned map[string]string `json:"cordoned,omitempty"`
	// Snapshot is the backup of etcd this generation's upgrade of Talos
	// relied on, taken before its first machine.
	Snapshot *Relied `json:"snapshot,omitempty"`
	// Failed stops the rollout of this generation.
	Failed *Failure `json:"failed,omitempty"`
	// Waiting is what the operation in progress waits for beyond its
	// machine (status.Rollout.Waiting), so that the observer of another
	// replica, which owns the tenant's machines, shows it too.
	Waiting string `json:"waiting,omitempty"`
	// Completed is set once every machine runs this generation.
	Completed bool      `json:"completed,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// RestartValues are restartedAt annotation values.
type RestartValues struct {
	Tenant string            `json:"tenant,omitempty"`
	Groups map[string]string `json:"groups,omitempty"`
}

// Operation is one operation on one machine.
type Operation struct {
	Machine      string `json:"machine"`
	Name         string `json:"name,omitempty"`
	Address      string `json:"address"`
	NodeGroup    string `json:"nodeGroup"`
	ControlPlane bool   `json:"controlPlane,omitempty"`
	Op           string `json:"op"`
	// Issued is set once the machine acknowledged the call; before, a
	// resumed rollout checks whether the call got through.
	Issued       bool   `json:"issued"`
	FromVersion  string `json:"fromVersion,omitempty"`
	ToVersion    string `json:"toVersion,omitempty"`
	ConfigSHA256 string `json:"configSHA256,omitempty"`
	// Mode is the mode an apply took (no_reboot or reboot).
	Mode string `json:"mode,omitempty"`
	// Lifecycle is set on an upgrade through LifecycleService.Upgrade
	// (lifecycle.go), and Phase says how far it got: "" while it
	// installs, PhaseInstalled, PhaseRebooted.
	Lifecycle bool   `json:"lifecycle,omitempty"`
	Phase     string `json:"phase,omitempty"`
	// RestartKey is the restart value the machine satisfies once it has
	// rebooted.
	RestartKey string `json:"restartKey,omitempty"`
	// WentDown is set once the machine was seen going through a reboot.
	WentDown bool `json:"wentDown,omitempty"`
	// Drain is what the drain of the machine's Node before the
	// operation did, when it was drained.
	Drain *DrainRecord `json:"drain,omitempty"`
	// Gates are the gates after the call that have opened, with their
	// times (kubegates.go).
	Gates     []GateTime `json:"gates,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	IssuedAt  time.Time  `json:"issuedAt,omitzero"`
	// here is set when this process issued the call; an operation read
	// back after a restart may have rebooted unseen.
	here bool
}

// Failure is why a rollout stopped.
type Failure struct {
	Generation string `json:"generation"`
	Machine    string `json:"machine"`
	Name       string `json:"name,omitempty"`
	NodeGroup  string `json:"nodeGroup"`
	Op         string `json:"op"`
	Reason     string `json:"reason"`
	// Cause is the condition reason of the stop: schema.ReasonDrainTimeout,
	// or empty for schema.ReasonRolloutFailed.
	Cause string `json:"cause,omitempty"`
	// RolledBack says that the machine was rolled back to its previous
	// Talos version.
	RolledBack bool      `json:"rolledBack,omitempty"`
	At         time.Time `json:"at"`
}

// sha256Hex is the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// groupRecords digests the desired targets.
func groupRecords(d Desired) map[string]GroupRecord {
	out := make(map[string]GroupRecord, len(d.Groups))
	for name, g := range d.Groups {
		out[name] = GroupRecord{ConfigSHA256: sha256Hex(g.Config), TalosVersion: vTag(g.TalosVersion), RestartedAt: g.RestartedAt}
		if p, ok := d.Drains[name]; ok && p != schema.EffectiveDrain(nil, nil) {
			r := out[name]
			r.Drain = fmt.Sprintf("%+v", p)
			out[name] = r
		}
	}
	return out
}

// machineRecords digests the machines' own configs; nil when there are
// none.
func machineRecords(d Desired) map[string]string {
	if len(d.Configs) == 0 {
		return nil
	}
	out := make(map[string]string, len(d.Configs))
	for id, cfg := range d.Configs {
		out[id] = sha256Hex(cfg)
	}
	return out
}

// configFor returns the config machine m should run: its own, else its
// node group's.
func (d Desired) configFor(m Machine) []byte {
	if cfg, ok := d.Configs[m.ID]; ok {
		return cfg
	}
	return d.Groups[m.NodeGroup].Config
}

// configSHA256 returns the hash of the config machine m should run, as
// rec records it.
func (rec *RolloutRecord) configSHA256(m Machine) string {
	if sum, ok := rec.Machines[m.ID]; ok {
		return sum
	}
	return rec.Groups[m.NodeGroup].ConfigSHA256
}

// generation digests the targets and restart values.
func generation(groups map[string]GroupRecord, machines map[string]string, tenantRestart string) string {
	h := sha256.New()
	fmt.Fprintf(h, "restart\x00%s\x00", tenantRestart)
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		g := groups[name]
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", name, g.ConfigSHA256, g.TalosVersion, g.RestartedAt)
		if g.Drain != "" {
			fmt.Fprintf(h, "drain\x00%s\x00", g.Drain)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(machines)) {
		fmt.Fprintf(h, "machine\x00%s\x00%s\x00", id, machines[id])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Rollout returns a tenant's rollout record, and whether there is one.
func (pl *Plane) Rollout(tenant string) (RolloutRecord, bool, error) {
	var rec RolloutRecord
	found, err := pl.load(KindRollout, tenant, &rec)
	return rec, found, err
}

// Pending reports whether the tenant's machines may need the plane even
// when its manifests did not change: it was never bootstrapped or rolled
// out, or a rollout was under way (a restart of the server interrupted
// it). A stopped rollout waits for a new commit and is not pending.
func (pl *Plane) Pending(tenant string) (bool, error) {
	boot, rec, err := pl.records(tenant)
	return err != nil || pending(boot, rec), err
}

// Wanted reports whether the tenant's machines need the plane although its
// manifests did not change: it is Pending, restarts (the restartedAt
// values its manifests declare, the tenant's and each node group's) name
// a restart that its rollouts have not done, or its kubernetesVersion is
// not the one its machines were rolled to (an upgrade that waited, for
// instance for deprecated APIs, when the server restarted).
func (pl *Plane) Wanted(tenant string, restarts RestartValues, kubernetesVersion string) (bool, error) {
	boot, rec, err := pl.records(tenant)
	if err != nil || pending(boot, rec) {
		return true, err
	}
	if rec.Failed == nil && rec.KubernetesVersion != "" && kubernetesVersion != rec.KubernetesVersion {
		return true, nil // an upgrade of Kubernetes that has not rolled yet
	}
	if v := restarts.Tenant; v != "" && v != rec.Restarts.Tenant {
		return true, nil
	}
	for group, v := range restarts.Groups {
		if v != "" && v != rec.Restarts.Groups[group] {
			return true, nil
		}
	}
	return false, nil
}

// pending is Pending of the tenant's bootstrap and rollout records, nil
// for one there is none of.
func pending(boot *BootstrapRecord, rec *RolloutRecord) bool {
	if boot == nil || !boot.Done || rec == nil {
		return true
	}
	return rec.Failed == nil && (rec.Current != nil || !rec.Completed)
}

// prepare loads the record and brings it to the desired generation.
func (pl *Plane) prepare(d Desired) (*RolloutRecord, error) {
	rec := &RolloutRecord{}
	found, err := pl.load(KindRollout, d.Tenant, rec)
	if err != nil {
		return nil, err
	}
	groups, machines := groupRecords(d), machineRecords(d)
	if !found {
		// Machines that exist when the plane first sees a tenant booted
		// after its restart annotations were set: nothing to restart.
		rec = &RolloutRecord{Tenant: d.Tenant, Restarts: currentRestarts(d), KubernetesVersion: d.KubernetesVersion}
	}
	gen := generation(groups, machines, d.RestartedAt)
	if rec.Generation != gen || !found {
		rec.Generation, rec.Groups, rec.Machines = gen, groups, machines
		rec.Touched, rec.Finished, rec.Completed = nil, nil, false
		if rec.Failed != nil && rec.Failed.Generation != gen {
			rec.Failed = nil
		}
		rec.UpdatedAt = pl.opts.Now()
		if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

func currentRestarts(d Desired) RestartValues {
	v := RestartValues{Tenant: d.RestartedAt}
	for name, g := range d.Groups {
		if g.RestartedAt != "" {
			if v.Groups == nil {
				v.Groups = map[string]string{}
			}
			v.Groups[name] = g.RestartedAt
		}
	}
	return v
}

// restartKey is the restart value machine m must have rebooted for, or ""
// when no restart of it is pending.
func restartKey(rec *RolloutRecord, d Desired, m Machine) string {
	t, g := d.RestartedAt, d.Groups[m.NodeGroup].RestartedAt
	pending := (t != "" && t != rec.Restarts.Tenant) || (g != "" && g != rec.Restarts.Groups[m.NodeGroup])
	if !pending {
		return ""
	}
	return t + "\x00" + g
}

// work is an operation some machine needs.
type work struct {
	m   Machine
	op  string
	obs Observation
	// drain is what the drain before the operation did.
	drain *DrainRecord
}

// plan returns the machines that need an operation, in rollout order, each
// with the first operation it needs: its config, then its Talos version,
// then a pending restart.
func (pl *Plane) plan(rec *RolloutRecord, d Desired, obs map[string]Observation) []work {
	ms := slices.Clone(d.Machines)
	Order(ms)
	var out []work
	for _, m := range ms {
		g, ok := rec.Groups[m.NodeGroup]
		if !ok {
			continue
		}
		o := obs[m.ID]
		var op string
		switch {
		case o.ConfigSHA256 != rec.configSHA256(m):
			op = OpApply
		case o.TalosVersion != g.TalosVersion:
			op = OpUpgrade
		case restartKey(rec, d, m) != "" && rec.Restarted[m.ID] != restartKey(rec, d, m):
			op = OpReboot
		default:
			continue
		}
		out = append(out, work{m: m, op: op, obs: o})
	}
	return out
}

// Roll brings the tenant's machines to d, one machine at a time, control
// planes first, and returns when every machine runs its node group's
// config and Talos version and has rebooted for pending restarts. Before a
// machine's operation it waits until the machine is ready and, for a
// control plane, until every etcd member is healthy; after it, until the
// machine is back, ready, on the new config or version, and etcd healthy.
//
// A machine that is not back within Options.Timeout, or comes back on the
// old version, fails the rollout: an upgraded machine is rolled back, the
// rollout stops there with a *StoppedError, and stays stopped until d
// changes. Gates that do not open within Options.Wait give a
// *WaitingError, and a tenant suspended meanwhile (Desired.Suspended) a
// *SuspendedError before the next machine. The call must follow
// Bootstrap: a rollout needs etcd. Whatever it returns, Rolled counts the
// operations it completed.
//
// A change of KubernetesVersion is rolled one component at a time
// (kubeupgrade.go) when d can render the steps.
func (pl *Plane) Roll(ctx context.Context, d Desired) (Rolled, error) {
	pl.setScrub(d.Tenant, d.Scrub)
	u, err := pl.kubeUpgrade(d)
	switch {
	case err != nil:
		return Rolled{}, err
	case u != nil:
		return pl.rollKubernetes(ctx, d, u)
	}
	return pl.roll(ctx, d)
}

// roll is Roll of one set of targets.
func (pl *Plane) roll(ctx context.Context, d Desired) (Rolled, error) {
	var done Rolled
	rec, err := pl.prepare(d)
	if err != nil {
		return done, err
	}
	for {
		if err := pl.uncordonLeft(ctx, d, rec); err != nil {
			return done, err
		}
		if rec.Failed != nil {
			pl.report(rec, nil)
			f := rec.Failed
			return done, &StoppedError{Tenant: d.Tenant, Machine: labelOf(f.Machine, f.Name), Op: f.Op, Cause: f.Cause, Reason: f.Reason}
		}
		if rec.Current != nil {
			if err := pl.finish(ctx, d, rec, &done); err != nil {
				return done, err
			}
			continue
		}
		obs := pl.observeAll(ctx, d)
		todo := pl.plan(rec, d, obs)
		pl.track(rec, todo)
		if len(todo) == 0 {
			if err := leftCordoned(d, rec); err != nil {
				return done, err
			}
			return done, pl.complete(d, rec)
		}
		next := todo[0]
		if d.suspended() {
			pl.report(rec, nil)
			return done, &SuspendedError{Tenant: d.Tenant, Done: len(rec.Finished), Of: len(rec.Touched)}
		}
		if err := pl.gate(ctx, d, next.m); err != nil {
			pl.report(rec, nil)
			return done, err
		}
		if o, _ := pl.prober.Last(next.m.ID); o.ConfigSHA256 != next.obs.ConfigSHA256 {
			continue // its config changed while the gate waited (a first install finished): plan again
		}
		// After the gate: the window's dry run needs the machine to answer,
		// and a machine still booting may need nothing once it has.
		if err := pl.windowClosed(ctx, d, rec, todo); err != nil {
			pl.report(rec, nil)
			return done, err
		}
		// An upgrade through LifecycleService is drained after its
		// install, before its reboot (finish).
		if !next.lifecycleWork() {
			if next.drain, err = pl.drainBefore(ctx, d, rec, next); err != nil {
				pl.report(rec, nil)
				return done, err
			}
		}
		if next.op == OpUpgrade && d.kubeUpgrade == nil {
			save := func() error { return pl.save(KindRollout, d.Tenant, rec) }
			if err := pl.snapshotBefore(ctx, d, &rec.Snapshot, "the upgrade of Talos to "+rec.Groups[next.m.NodeGroup].TalosVersion, save); err != nil {
				pl.report(rec, nil)
				return done, err
			}
		}
		if err := pl.start(ctx, d, rec, next); err != nil {
			return done, err
		}
	}
}

// Rolled counts what one call of Roll did.
type Rolled struct {
	// Machines are the ids of the machines it changed, in the order it
	// changed them.
	Machines []string
	// Ops counts its completed operations by kind (OpApply, OpUpgrade,
	// OpReboot).
	Ops map[string]int
}

// merge adds what another call did.
func (r *Rolled) merge(o Rolled) {
	for _, id := range o.Machines {
		if !slices.Contains(r.Machines, id) {
			r.Machines = append(r.Machines, id)
		}
	}
	for op, n := range o.Ops {
		if r.Ops == nil {
			r.Ops = map[string]int{}
		}
		r.Ops[op] += n
	}
}

// add counts a completed operation.
func (r *Rolled) add(op *Operation) {
	if !slices.Contains(r.Machines, op.Machine) {
		r.Machines = append(r.Machines, op.Machine)
	}
	if r.Ops == nil {
		r.Ops = map[string]int{}
	}
	r.Ops[op.Op]++
}

func labelOf(id, name string) string { return Machine{ID: id, Name: name}.label() }

// observeAll probes every machine of d now.
func (pl *Plane) observeAll(ctx context.Context, d Desired) map[string]Observation {
	out := make(map[string]Observation, len(d.Machines))
	obs := make([]Observation, len(d.Machines))
	pl.each(d.Machines, func(i int, m Machine) { obs[i] = pl.prober.Fresh(ctx, d.Tenant, d.Bundle, m) })
	for i, m := range d.Machines {
		out[m.ID] = obs[i]
	}
	return out
}

// track notes the machines the generation touches and those it finished:
// a machine that needs another operation is not finished.
func (pl *Plane) track(rec *RolloutRecord, todo []work) {
	pending := map[string]bool{}
	for _, w := range todo {
		pending[w.m.ID] = true
		if rec.Touched == nil {
			rec.Touched = map[string]string{}
		}
		rec.Touched[w.m.ID] = w.m.NodeGroup
	}
	for id := range rec.Touched {
		switch {
		case pending[id]:
			delete(rec.Finished, id)
		case rec.Finished == nil:
			rec.Finished = map[string]bool{id: true}
		default:
			rec.Finished[id] = true
		}
	}
}

// complete records a finished rollout: the pending restarts are handled.
func (pl *Plane) complete(d Desired, rec *RolloutRecord) error {
	rec.Restarts, rec.Restarted, rec.Completed = currentRestarts(d), nil, true
	rec.KubernetesVersion = d.KubernetesVersion
	rec.UpdatedAt = pl.opts.Now()
	if err := pl.save(KindRollout, d.Tenant, rec); err != nil {
		return err
	}
	pl.report(rec, nil)
	return nil
}

// machineByID finds a machine of d.
func machineByID(d Desired, id string) (Machine, bool) {
	for _, m := range d.Machines {
		if m.ID == id {
			return m, true
		}
	}
	return Machine{}, false
}
