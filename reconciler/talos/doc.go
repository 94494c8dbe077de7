// Package talos is the reconciler's Talos plane: everything that happens
// inside a tenant's machines, through the Talos API, beside tofu and never
// inside it.
//
// It talks to each machine directly (gRPC with mTLS on ADDRESS:50000)
// with the machinery client and an os:admin client certificate issued from
// the tenant's secrets bundle, or, to a machine that waits in maintenance
// mode, over TLS without a client certificate. One Pool makes every such
// connection, the reconciler's too (log streams, bare-metal configs): it
// owns their dialing, TLS, idle timeouts and closing. On top of that it
//
//   - bootstraps etcd exactly once per tenant, on the first control plane
//     by stable order, after asking every control plane for its etcd
//     membership (Plane.Bootstrap);
//   - rolls changes through the machines one at a time, control planes
//     first, behind health gates: a changed machine config with
//     ApplyConfiguration, a new Talos version with Upgrade (and Rollback
//     when the machine does not come back), restarts declared with the
//     rezuscloud.io/restartedAt annotation with Reboot (Plane.Roll); a
//     machine with a config of its own (a bare-metal machine's host name
//     and install disk, Desired.Configs) is compared with and given that
//     one, never its node group's;
//   - observes machines for their status: stage, readiness, versions,
//     the hash of the running config and the inventory (hardware, network,
//     schematic), either by following each machine with COSI watches over
//     its tenant's stream connection (streams.go), with probes only while
//     a watch is broken (watch.go), the machines past the bound on watches
//     by their tenant's events stream (events.go), or by one probe per
//     machine per TTL (Prober), with bounded concurrency either way; a
//     machine that waits in maintenance mode shows stage maintenance. What it observes, and where a
//     rollout stands, is recorded through package reconciler/status, the
//     one writer of status (RunObserver); the gauges (load, memory,
//     etcd) of the machines that follow by watch or events stream are
//     sampled every minute for the caller to keep (sampler.go);
//   - gives bare-metal machines their config in maintenance mode and
//     resets those a node group no longer uses (metal.go);
//   - streams etcd snapshots from the first control plane by stable order
//     whose member is healthy (Plane.Snapshot), and restores one: every
//     control plane wiped, the first bootstrapped from the snapshot with
//     RecoverEtcd, the others joined, the workers' kubelets restarted
//     (Plane.Restore). Where snapshots rest is not its concern: the
//     caller gives and takes the streams.
//
// What must survive a restart of the server (that a tenant was
// bootstrapped, which machine a rollout is working on, where a restore
// stands) is kept as internal records of the store before the call it
// guards is made.
//
// The plane never changes spec or TF state, never writes a rendered
// config or a secret to disk or to a log, and never writes a status but
// through reconciler/status. It imports nothing of package reconciler:
// the reconciler calls it, and a rollout that waits for a maintenance
// window says so with internal/window's WaitError.
package talos
