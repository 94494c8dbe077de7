package talosnode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// Files of a node's disk, beside sim.UserDataFile.
const (
	stateFile   = "state.json"    // the node's state
	journalFile = "journal.jsonl" // the write calls it received
	configsDir  = "configs"       // configs it was given, by SHA-256: configs/<sha256>.yaml
)

// writeFile writes dir/name (0600) atomically for readers and crashes of
// this process: a temporary file and a rename. There is no fsync: the
// simulated machine's disk must survive a restart of the host, not of the
// computer.
func writeFile(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// saveState writes the state encoded at seq, unless a later one was saved.
func (h *Host) saveState(n *node, seq uint64, b []byte) error {
	n.saveMu.Lock()
	defer n.saveMu.Unlock()
	if n.gone.Load() {
		return nil
	}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return fmt.Errorf("machine %s: disk: %w", n.st.ID, err)
	}
	if n.savedSeq >= seq {
		return nil
	}
	if err := writeFile(n.dir, stateFile, b); err != nil {
		return fmt.Errorf("machine %s: save state: %w", n.st.ID, err)
	}
	n.savedSeq = seq
	return nil
}

func (h *Host) writeUserData(n *node, b []byte) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return fmt.Errorf("machine %s: disk: %w", n.st.ID, err)
	}
	if err := writeFile(n.dir, sim.UserDataFile, b); err != nil {
		return fmt.Errorf("machine %s: write user data: %w", n.st.ID, err)
	}
	return nil
}

func (h *Host) readUserData(n *node) ([]byte, error) {
	return os.ReadFile(filepath.Join(n.dir, sim.UserDataFile))
}

// writeConfig keeps a config on n's disk under its hash.
func (h *Host) writeConfig(n *node, hash string, b []byte) error {
	d := filepath.Join(n.dir, configsDir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("machine %s: disk: %w", n.st.ID, err)
	}
	if _, err := os.Stat(filepath.Join(d, hash+".yaml")); err == nil {
		return nil
	}
	if err := writeFile(d, hash+".yaml", b); err != nil {
		return fmt.Errorf("machine %s: write config: %w", n.st.ID, err)
	}
	return nil
}

// readConfig returns the config with that hash from n's disk: one it was
// given, or its user data.
func (h *Host) readConfig(dir, hash string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, configsDir, hash+".yaml"))
	if err == nil {
		return b, nil
	}
	if ud, uerr := os.ReadFile(filepath.Join(dir, sim.UserDataFile)); uerr == nil && hashHex(ud) == hash {
		return ud, nil
	}
	return nil, fmt.Errorf("config %s is not on the machine's disk: %w", hash[:12], err)
}

// restore loads the nodes whose state is on disk. Machines of records
// that are gone (deleted while no host ran) lose their disks.
func (h *Host) restore() error {
	root := filepath.Join(h.opts.Dir, sim.DisksDir)
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read machine disks: %w", err)
	}
	for _, e := range entries {
		if h.ctx.Err() != nil {
			return nil // closing
		}
		if !e.IsDir() || !sim.ValidDiskID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, stateFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a record's machine that never received a write call
		}
		var st state
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil || st.ID != e.Name() {
			h.log.Warn("skip a machine's state that cannot be read", "dir", dir, "err", err)
			continue
		}
		if st.Origin == originRecord {
			if _, err := h.store.Get(st.ID); errors.Is(err, sim.ErrNotFound) {
				os.RemoveAll(dir)
				continue
			}
		}
		n := newNode(st)
		n.dir = dir
		h.mu.Lock()
		if h.byAddr[n.addr] == nil {
			h.insert(n)
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.byID {
		h.advance(n, h.now())
		h.syncListener(n)
		h.reschedule(n)
	}
	return nil
}

// JournalEntry is one write call a node received, as its journal on disk
// (disk/<id>/journal.jsonl, one JSON object per line) keeps it.
type JournalEntry struct {
	Time time.Time `json:"time"`
	// Call is the method: ApplyConfiguration, Bootstrap, Upgrade (of the
	// MachineService), LifecycleService.Upgrade, Rollback, Reboot, Reset,
	// EtcdLeaveCluster, EtcdRemoveMemberByID, EtcdRecover, ServiceRestart.
	Call string `json:"call"`
	// Mode is ApplyConfiguration's requested mode (auto, no_reboot,
	// reboot, staged, try); Applied the mode it took (auto becomes
	// no_reboot or reboot).
	Mode    string `json:"mode,omitempty"`
	Applied string `json:"applied,omitempty"`
	DryRun  bool   `json:"dryRun,omitempty"`
	// ConfigSHA256 is the SHA-256 of the config applied.
	ConfigSHA256 string `json:"configSHA256,omitempty"`
	// Image is an upgrade's installer image, Version the Talos version the
	// node ran when the call came.
	Image   string `json:"image,omitempty"`
	Version string `json:"version,omitempty"`
	// Graceful and Reboot are Reset's options, Wipe the labels of the
	// system partitions it was asked to wipe (none: the whole disk).
	Graceful bool     `json:"graceful,omitempty"`
	Reboot   bool     `json:"reboot,omitempty"`
	Wipe     []string `json:"wipe,omitempty"`
	// Recover is set on a Bootstrap that recovers etcd from an uploaded
	// snapshot (BootstrapRequest.RecoverEtcd).
	Recover bool `json:"recover,omitempty"`
	// Size is the size of the snapshot EtcdRecover received.
	Size int64 `json:"size,omitempty"`
	// Service is ServiceRestart's service.
	Service string `json:"service,omitempty"`
	// MemberID is EtcdRemoveMemberByID's member.
	MemberID uint64 `json:"memberID,omitempty"`
	// Stage is the node's stage when the call came.
	Stage string `json:"stage"`
	// Error is set when the node refused the call; it changed nothing then.
	Error string `json:"error,omitempty"`
}

// appendJournal adds e to n's journal.
func (h *Host) appendJournal(n *node, e JournalEntry) error {
	n.saveMu.Lock()
	defer n.saveMu.Unlock()
	if n.gone.Load() {
		return nil
	}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(e)
	f, err := os.OpenFile(filepath.Join(n.dir, journalFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("machine %s: journal: %w", n.st.ID, err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	h.mu.Lock()
	n.notify() // followed logs show the call
	h.mu.Unlock()
	return err
}

// Journal returns the write calls the node (by id, name, host name or
// address) received, oldest first.
func (h *Host) Journal(key string) ([]JournalEntry, error) {
	h.mu.Lock()
	n := h.lookup(key)
	h.mu.Unlock()
	if n == nil {
		return nil, fmt.Errorf("journal: no machine %q", key)
	}
	n.saveMu.Lock()
	defer n.saveMu.Unlock()
	return ReadJournal(h.opts.Dir, n.st.ID)
}

// ReadJournal reads the journal of machine id in a sim dir, without a
// host: end-to-end tests read the nodes of a server they run.
func ReadJournal(simDir, id string) ([]JournalEntry, error) {
	if !sim.ValidDiskID(id) {
		return nil, fmt.Errorf("journal: machine id %q is not valid", id)
	}
	f, err := os.Open(filepath.Join(simDir, sim.DisksDir, id, journalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal of %s: %w", id, err)
	}
	defer f.Close()
	var out []JournalEntry
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var e JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("journal of %s, line %d: %w", id, line, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
