package talosnode

import (
	"bytes"
	"fmt"
	"time"
)

// add creates the node of st, powers it on with its user data at
// st.CreatedAt, and starts serving it. With persist, the user data and the
// state go to the node's disk first (machines without a record).
func (h *Host) add(st state, userData []byte, persist bool) error {
	h.mu.Lock()
	if old := h.byID[st.ID]; old != nil {
		h.mu.Unlock()
		if old.st.Address != st.Address {
			return fmt.Errorf("machine %s exists with address %s, not %s", st.ID, old.st.Address, st.Address)
		}
		return nil
	}
	n := newNode(st)
	if other := h.byAddr[n.addr]; other != nil {
		h.mu.Unlock()
		return fmt.Errorf("machine %s: address %s is taken by machine %s", st.ID, st.Address, other.st.ID)
	}
	n.dir = h.diskDir(st.ID)
	h.powerOn(n, userData, st.CreatedAt)
	h.insert(n)
	if !persist {
		// A record's machine keeps no state until its first write
		// call: its record and user data say all of it.
		h.touch(n)
		h.mu.Unlock()
		return nil
	}
	save := h.changed(n)
	h.mu.Unlock()
	if err := h.writeUserData(n, userData); err != nil {
		return err
	}
	return save()
}

// powerOn starts n's boot at t: into maintenance mode without a config,
// with its config when the user data holds a valid one, and not at all
// (down in the booting stage) with an invalid one, as Talos does when the
// platform's config does not validate.
func (h *Host) powerOn(n *node, userData []byte, t time.Time) {
	n.st.Running, n.st.Staged, n.st.Revert, n.st.BootError = nil, nil, nil, ""
	if len(bytes.TrimSpace(userData)) == 0 {
		n.start(t, bootSteps(h.t))
		return
	}
	sum, err := h.check(userData, validationMode{metal: n.st.Metal, installed: n.st.Installed})
	if err != nil {
		n.st.BootError = fmt.Sprintf("failed to validate config acquired via platform %s: %s", n.st.Platform, err)
		n.st.Plan = plan{}
		return
	}
	n.st.Running = &configRef{Hash: hashHex(userData), Summary: sum}
	if n.st.Metal && !n.st.Installed {
		n.start(t, installSteps(h.t))
		return
	}
	n.start(t, bootSteps(h.t))
}

// check loads and validates a config, caching the outcome by content and
// mode, in memory and in the sim dir (checkedFile): many machines boot the
// same config, and a host opened again boots its machines without parsing
// their configs.
func (h *Host) check(b []byte, mode validationMode) (summary, error) {
	key := hashHex(b) + "/" + mode.String() + fmt.Sprint(mode.RequiresInstall())
	if c, ok := h.checked[key]; ok {
		return c.sum, c.err
	}
	cfg, _, err := loadConfig(b, mode)
	h.parsed++
	var sum summary
	if err == nil {
		sum, err = summarize(cfg)
	}
	if len(h.checked) > 4096 {
		clear(h.checked)
	}
	c := checkedConfig{sum: sum, err: err}
	h.checked[key] = c
	h.keepChecked(key, c)
	return sum, err
}

// insert indexes a new node. Called with h.mu held.
func (h *Host) insert(n *node) {
	h.byID[n.st.ID] = n
	h.byAddr[n.addr] = n
	n.setFault(h.faults.faultFor(n))
	h.index(n)
}

// index files n under its running config's cluster, and registers a
// control plane's CA key as its cluster's trustd. Called with h.mu held.
func (h *Host) index(n *node) {
	key := n.cluster()
	if n.gone.Load() {
		key = ""
	}
	if n.filedUnder != "" && n.filedUnder != key {
		set := h.clusters[n.filedUnder]
		delete(set, n)
		if len(set) == 0 {
			delete(h.clusters, n.filedUnder)
		}
	}
	n.filedUnder = key
	if key == "" {
		return
	}
	s := n.st.Running.Summary
	set := h.clusters[key]
	if set == nil {
		set = map[*node]struct{}{}
		h.clusters[key] = set
	}
	set[n] = struct{}{}
	if s.ControlPlane && len(s.CAKey) > 0 {
		h.trustd[s.Cluster+"\x00"+s.Token+"\x00"+hashHex(s.CA)] = s.CAKey
	}
}

// dropLocked stops serving n and forgets it. Called with h.mu held.
func (h *Host) dropLocked(n *node) {
	n.gone.Store(true)
	h.closeListener(n)
	delete(h.byID, n.st.ID)
	if h.byAddr[n.addr] == n {
		delete(h.byAddr, n.addr)
	}
	h.index(n)
	n.notify()
	h.notifyMembers(n)
}

// changed is called with h.mu held after n changed: it wakes streams,
// opens or closes n's port, schedules n's next stage change, and returns
// the function that saves n's state, to be called without h.mu.
func (h *Host) changed(n *node) func() error {
	h.touch(n)
	seq, b := n.seq, n.encodeState()
	return func() error { return h.saveState(n, seq, b) }
}

// touch is changed without the save: it wakes n's streams, opens or
// closes its port and schedules its next stage change. Called with h.mu
// held.
func (h *Host) touch(n *node) {
	n.seq++
	h.notify(n)
	h.notifyMembers(n)
	h.syncListener(n)
	h.reschedule(n)
}

// advance brings n's state up to now: the effects of the steps that began,
// the end of its plan, the revert of a try-mode config, joining etcd.
// Nothing needs saving: the same state follows from the saved one. Called
// with h.mu held.
func (h *Host) advance(n *node, now time.Time) {
	if h.logging {
		return
	}
	st := &n.st
	changed := false
	for begun := st.Plan.begun(now); st.Plan.Done < begun; st.Plan.Done++ {
		for _, e := range st.Plan.Steps[st.Plan.Done].Effects {
			h.effect(n, e)
		}
		changed = true
	}
	if len(st.Plan.Steps) > 0 && !now.Before(st.Plan.end()) {
		st.UpSince = st.Plan.end()
		st.Plan = plan{}
		changed = true
	}
	if st.Revert != nil && !now.Before(st.TryUntil) {
		st.Running, st.Revert, st.TryUntil = st.Revert, nil, time.Time{}
		h.index(n)
		changed = true
	}
	if h.joinEtcd(n, now) {
		changed = true
	}
	if changed {
		h.notify(n)
		h.notifyMembers(n)
	}
}

// effect applies one step effect to n. Called with h.mu held.
func (h *Host) effect(n *node, e string) {
	st := &n.st
	switch e {
	case effectInstalled:
		st.Installed = true
		if st.Running != nil && st.Running.Summary.InstallVersion != "" {
			st.Version = st.Running.Summary.InstallVersion
		}
	case effectActivate:
		if st.Staged != nil {
			st.Running, st.Staged = st.Staged, nil
			h.index(n)
		}
	case effectSwitch:
		if st.UpgradeTo != "" {
			st.PreviousVersion, st.Version, st.UpgradeTo = st.Version, st.UpgradeTo, ""
		}
		st.FellBack = false
	case effectFellBack:
		st.UpgradeTo, st.FellBack = "", true
	case effectRollback:
		if st.FellBack {
			st.FellBack = false
		} else if st.PreviousVersion != "" {
			st.Version, st.PreviousVersion = st.PreviousVersion, st.Version
		}
	case effectLeaveEtcd:
		st.Etcd.Member = false
		st.Etcd.LeftAt = st.Plan.Start
	case effectWipe:
		h.wipe(n)
	case effectWipeData:
		h.wipeData(n)
	case effectRebootCount:
		st.Reboots++
	case effectPowerOff:
		st.PoweredOff = true
	}
}

// wipe is a reset's end: the config and etcd data are gone. A metal
// machine boots its installer into maintenance mode again; a cloud machine
// acquires its user data from the platform again, as Talos does.
func (h *Host) wipe(n *node) {
	h.wipeData(n)
	st := &n.st
	st.Running, st.Staged, st.Revert = nil, nil, nil
	if st.Metal {
		st.Installed = false
	} else if ud, err := h.readUserData(n); err == nil && len(bytes.TrimSpace(ud)) > 0 {
		if sum, err := h.check(ud, validationMode{}); err == nil {
			st.Running = &configRef{Hash: hashHex(ud), Summary: sum}
		}
	}
	h.index(n)
}

// joinEtcd makes a running control plane of a bootstrapped cluster an etcd
// member, as of when both were true. Called with h.mu held.
func (h *Host) joinEtcd(n *node, now time.Time) bool {
	if n.st.Etcd.Member || !n.controlPlane() || !n.running(now) || !n.st.UpSince.After(n.st.Etcd.LeftAt) {
		return false
	}
	since, ok := h.bootstrappedSince(n.cluster(), n)
	if !ok {
		return false
	}
	at := since
	if n.st.UpSince.After(at) {
		at = n.st.UpSince
	}
	n.st.Etcd = etcdState{Member: true, JoinedAt: at, ID: memberID(n.st.ID, at)}
	return true
}

// bootstrappedSince returns when the cluster's etcd was created: the
// earliest join of its members other than but.
func (h *Host) bootstrappedSince(cluster string, but *node) (time.Time, bool) {
	var first time.Time
	for m := range h.clusters[cluster] {
		if m != but && m.st.Etcd.Member && (first.IsZero() || m.st.Etcd.JoinedAt.Before(first)) {
			first = m.st.Etcd.JoinedAt
		}
	}
	return first, !first.IsZero()
}

// wipeData is the wipe of a node's EPHEMERAL partition: its etcd member
// and data, and an etcd snapshot uploaded for recovery, are gone. The
// cluster's etcd lives on in its other members, if any; a real one is
// lost with the last. Called with h.mu held.
func (h *Host) wipeData(n *node) {
	n.st.Etcd = etcdState{}
	h.dropRecovery(n)
	h.realEtcdLost(n)
}
