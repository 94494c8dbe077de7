package talosnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"time"
)

// FaultsFile is the file of a sim dir that injects faults into its nodes.
// The host reads it whenever it changes, so tests that run a server
// binary write it from outside (WriteFaults).
const FaultsFile = "faults.json"

// Fault is what is wrong with one node. Faults hold while they are in the
// faults file, and take effect at once.
type Fault struct {
	// Refuse closes the node's API port: connections are refused, open
	// ones are dropped.
	Refuse bool `json:"refuse,omitempty"`
	// Unhealthy names a service ("kubelet", "etcd", "apid", ...) whose
	// health check fails: ServiceList shows it unhealthy, MachineStatus is
	// not ready with the unmet condition "services" ("<service> not
	// healthy"), and an unhealthy etcd does not count for quorum.
	Unhealthy string `json:"unhealthy,omitempty"`
	// NoUpgradeReturn makes an upgrade's new version never come up: after
	// the upgrading stage the machine reboots and stays down, refusing
	// connections, for Timings.Fallback; then its boot loader gives up and
	// boots the previous version, and the node answers again, running the
	// old version. A Rollback then reboots it and keeps the old version.
	// The fault applies to upgrades that start while it is set.
	NoUpgradeReturn bool `json:"noUpgradeReturn,omitempty"`
	// SnapshotHang makes the node's etcd snapshots hang: an EtcdSnapshot
	// stream sends its first 64 KiB, then nothing until the call's
	// context ends. The fault applies to snapshots that start while it is
	// set.
	SnapshotHang bool `json:"snapshotHang,omitempty"`
	// WipeEtcd, when it is set on a control plane, makes every control
	// plane of its cluster lose its etcd data at once (Host.WipeEtcd), as
	// after losing all their disks: an event, which happens once each
	// time the fault appears, so that tests that run a server binary can
	// make it happen from outside.
	WipeEtcd bool `json:"wipeEtcd,omitempty"`
	// WatchBroken breaks the node's COSI watches only: open watches end
	// with Unavailable and new ones are refused, while every unary call
	// (Version, COSI Get and List, MachineService) keeps working.
	WatchBroken bool `json:"watchBroken,omitempty"`
	// EventsDelay holds an events stream that reaches the node (directly,
	// or as the apid that fans it out) for that long before its first
	// message, as a loaded apid does. It applies to streams that start
	// while it is set.
	EventsDelay time.Duration `json:"eventsDelay,omitempty"`
	// StatusDelay holds each COSI Get of the node's MachineStatus for that
	// long after the node read it, as a loaded node answers late: the
	// answer tells the machine as it was when read. It applies to reads
	// that start while it is set.
	StatusDelay time.Duration `json:"statusDelay,omitempty"`
	// Silent makes the node's API stop answering without closing
	// anything, as behind a network that drops its packets: its port
	// still accepts connections, but nothing is read from or written to
	// any of them (a TLS handshake hangs) while it holds; what was sent
	// meanwhile goes through once it clears, as TCP delivers it after a
	// partition.
	Silent bool `json:"silent,omitempty"`
	// Disks, when not empty, replace the node's disks (the first is the
	// system disk), as after swapping them: its block resources change
	// and their watches fire.
	Disks []Disk `json:"disks,omitempty"`
	// Addresses, when not empty, replace the node's addresses (CIDR, or bare
	// addresses of 127.0.0.0/8, which get /8): its NodeAddress resources
	// change and their watches fire.
	Addresses []string `json:"addresses,omitempty"`
}

// equal reports whether f and g are the same fault.
func (f Fault) equal(g Fault) bool { return reflect.DeepEqual(f, g) }

// zero reports whether f is no fault at all.
func (f Fault) zero() bool { return f.equal(Fault{}) }

// Faults are the faults of a sim dir's nodes, each keyed by machine id,
// machine name, host name or address.
type Faults map[string]Fault

// check says what is wrong with the disks and addresses of the faults.
func (f Faults) check() error {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkDisks(f[k].Disks); err != nil {
			return fmt.Errorf("fault of %s: %w", k, err)
		}
		for _, a := range f[k].Addresses {
			if _, err := parseAddress(a); err != nil {
				return fmt.Errorf("fault of %s: %w", k, err)
			}
		}
	}
	return nil
}

// faultFor returns the fault of n: by id first, then name, host name, address.
func (f Faults) faultFor(n *node) Fault {
	for _, k := range []string{n.st.ID, n.st.Name, n.hostname(), n.st.Address} {
		if x, ok := f[k]; ok && k != "" {
			return x
		}
	}
	return Fault{}
}

// ReadFaults reads the faults of a sim dir; no file means none.
func ReadFaults(simDir string) (Faults, error) {
	b, err := os.ReadFile(filepath.Join(simDir, FaultsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Faults{}, nil
	}
	if err != nil {
		return nil, err
	}
	f := Faults{}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(simDir, FaultsFile), err)
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(simDir, FaultsFile), err)
	}
	return f, nil
}

// WriteFaults replaces the faults of a sim dir. A host serving it applies
// them within its poll interval, at once where file notifications work.
func WriteFaults(simDir string, f Faults) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(simDir, FaultsFile, append(b, '\n'))
}

// SetFault sets (or with the zero Fault, clears) the fault of one node,
// by machine id, name, host name or address, and applies it before it
// returns.
func (h *Host) SetFault(key string, f Fault) error {
	if err := (Faults{key: f}).check(); err != nil {
		return err
	}
	h.faultsMu.Lock()
	defer h.faultsMu.Unlock()
	all, err := ReadFaults(h.opts.Dir)
	if err != nil {
		return err
	}
	if f.zero() {
		delete(all, key)
	} else {
		all[key] = f
	}
	if err := WriteFaults(h.opts.Dir, all); err != nil {
		return err
	}
	h.applyFaults(all)
	return nil
}

// reloadFaults reads the faults file and applies it.
func (h *Host) reloadFaults() error {
	h.faultsMu.Lock()
	defer h.faultsMu.Unlock()
	all, err := ReadFaults(h.opts.Dir)
	if err != nil {
		return err
	}
	h.applyFaults(all)
	return nil
}

func (h *Host) applyFaults(all Faults) {
	h.mu.Lock()
	h.faults = all
	var wipe []string
	for _, n := range h.byID {
		if f := all.faultFor(n); !f.equal(n.fault) {
			if f.WipeEtcd && !n.fault.WipeEtcd {
				wipe = append(wipe, n.st.ID)
			}
			n.setFault(f)
			h.notify(n)
			h.syncListener(n)
		}
	}
	h.mu.Unlock()
	for _, id := range wipe {
		if err := h.WipeEtcd(id); err != nil {
			h.log.Warn("fault wipeEtcd", "machine", id, "err", err)
		}
	}
}
