// Package talosnode simulates Talos machines that are real Talos API
// servers: every machine of a sim dir (internal/sim), and every machine
// another simulated cloud boots or a bare-metal test starts, answers the
// Talos gRPC API (MachineService, LifecycleService and COSI State) on
// ADDRESS:50000 to the real machinery client, with Talos's message shapes
// and errors, and by the Talos version each node runs: LifecycleService
// from 1.13, MachineService.Upgrade until 1.17 (upgrade.go). COSI
// serves MachineStatus, the running MachineConfig, the cluster's Members
// and the machine's inventory (hardware, disks, network, extensions;
// inventory.go), with the resource definitions and namespaces of these,
// so that talosctl resolves their names (resources.go). The inventory
// follows from the machine's Hardware (a sim record's shape, a flavor, a
// metal machine's) and changes through Host.SetInventory or a fault;
// LoadAvg and Memory follow from it and the clock (gauges.go).
//
// A Host serves all nodes of one sim dir from one process: one gRPC
// server, one listening socket per node (accepted through one epoll set),
// TLS chosen per connection by the address it reached, and handlers that
// find their node the same way. A node without a config answers as
// Talos's maintenance server (insecure TLS with a self-signed certificate,
// ApplyConfiguration only); a node with one serves mTLS with a certificate
// issued from its config's machine.ca and accepts clients whose
// certificates chain to it, authorizing by the role in their Organization.
//
// Nodes cost nothing while idle: their stages (booting, installing,
// running, rebooting, upgrading, resetting, maintenance) follow lazily from
// timestamps, and one scheduler goroutine opens and closes the ports of
// the nodes in the middle of a stage change. A node's state (config,
// versions, etcd membership, plan) and its journal of write calls live on
// its disk in the sim dir, disk/<id>/, and survive a restart of the host.
// Faults come from <sim dir>/faults.json (WriteFaults, Host.SetFault);
// one of them breaks a node's COSI watches only (Fault.WatchBroken).
//
// A cluster's etcd holds data. Where the host runs the cluster's
// Kubernetes API (kube.go), it is that API's real etcd: EtcdSnapshot
// streams its own snapshot, and a recovery restores one with etcdutl
// (realetcd.go). Elsewhere it is simulated, kept per cluster in
// <sim dir>/etcd: key/value pairs that tests write (Host.EtcdPut) and a
// generated filler of any size (Host.SetEtcdFiller), in a snapshot format
// of its own ending with its SHA-256 (etcddata.go). Either survives a
// restart of the host. EtcdRecover keeps a checked snapshot on a control
// plane for Bootstrap with RecoverEtcd (recover.go); a reset of EPHEMERAL
// and Host.WipeEtcd take etcd data away.
// What validating each distinct config found is kept in
// <sim dir>/talos-checked.jsonl, so that a host opened again boots its
// machines without parsing their configs; with Options.Background they
// boot on the host's own goroutine while its process does other things.
//
// This package must not import the reconciler or the backend: it is a
// simulated peer, not a part of RezusCloud.
package talosnode
