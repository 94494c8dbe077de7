// Package sim is the simulated cloud's machine store: the record format of
// one simulated machine, the directory layout that holds them, and the
// cloud's address block. The rezussim provider writes records and disks
// here; the Talos node host (internal/sim/talosnode) reads them and serves
// every machine as a simulated Talos node, and tests read them to see what
// the cloud holds. The server never reads them: it sees the machines
// through tofu's state and their Talos API, as it sees a real cloud's.
//
// Layout of a sim dir (dir 0700, files 0600):
//
//	sim.json                 the cloud's settings: {"block": B}, written once at creation
//	<id>.json                one record per machine
//	disk/<id>/user-data      the machine's disk: the user data (Talos config) it was created with
//	disk/<id>/...            the node's own state, kept by the node host
//	kubernetes/<cluster>/    a cluster's Kubernetes control plane, run by the node host (kubeapi)
//	faults.json              faults injected into nodes, read by the node host
//	fail-next                a count N: the next N machine changes fail (FaultsFile)
//	.lock                    the writers' lock
//
// Records and settings are written atomically through a temporary file and
// a rename, so a reader never sees half a file. Writers serialise on
// <dir>/.lock, which also makes address allocation safe across provider
// processes sharing a directory. Readers need no lock. A machine's disk is
// written before its record and removed after it, so a reader that sees a
// record finds its disk.
//
// A record never holds a machine's user data, only its SHA-256: records are
// what the provider and tests read. The user data lives on the
// machine's disk only, as on a real cloud, which is why a sim dir is a
// simulated cloud's own place, outside RezusCloud's data dir.
//
// Addresses: every sim dir owns one loopback block 127.B.0.0/16 (B in
// 1..254), chosen at random when the dir is created among the blocks that
// no live process claims (a node host claims its block for its lifetime by
// listening on 127.B.255.254:50000). Machines get the lowest free address
// of the block, so allocation is deterministic given the addresses taken.
// No simulated machine ever has an address outside 127.0.0.0/8.
//
// The node host may run in a process of its own, apart from the processes
// that create machines (several servers share one simulated cloud as they
// would share a real one). Those open the dir with OpenExisting, which
// never makes a cloud, and Served tells them whether a host is live.
//
// This package must not import anything else of the project but
// internal/atomicfile.
package sim
