package talosnode

import (
	"os"
	"path/filepath"
)

// Files of a control plane's disk that hold an etcd snapshot uploaded by
// EtcdRecover for the next Bootstrap with RecoverEtcd, as Talos keeps it
// in /var/lib/etcd.snapshot on EPHEMERAL: a real etcd's snapshot as it
// came, or a simulated one's data, decoded.
const (
	recoveryFile    = "etcd.snapshot"
	recoverySimFile = "etcd.snapshot.json"
)

// dropRecovery removes n's uploaded snapshot, if any.
func (h *Host) dropRecovery(n *node) {
	for _, f := range []string{recoveryFile, recoverySimFile} {
		os.Remove(filepath.Join(n.dir, f))
	}
}
