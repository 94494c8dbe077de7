package talosnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// watch keeps the nodes in step with the machine records and the faults
// file: on file notifications (coalesced) and every poll interval.
func (h *Host) watch(ctx context.Context) {
	var events <-chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer w.Close()
		if err := w.Add(h.opts.Dir); err == nil {
			events = w.Events
		}
	}
	poll := time.NewTicker(h.opts.PollInterval)
	defer poll.Stop()
	var soon <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			if name := filepath.Base(ev.Name); strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".") && soon == nil {
				soon = time.After(20 * time.Millisecond)
			}
			continue
		case <-soon:
			soon = nil
		case <-poll.C:
		}
		if err := h.Sync(); err != nil {
			h.log.Debug("sync simulated nodes", "err", err)
		}
	}
}

// Sync reads the machine records and the faults file now: machines whose
// record is new power on, machines whose record is gone are removed with
// their disks. The host does this by itself on changes; tests call it to
// not wait. It waits for the restore of a host opened in the background.
func (h *Host) Sync() error {
	h.waitRestored()
	h.syncMu.Lock()
	defer h.syncMu.Unlock()
	errs := []error{h.reloadFaults()}
	entries, err := os.ReadDir(h.opts.Dir)
	if err != nil {
		return fmt.Errorf("read machine records: %w", err)
	}
	ids := map[string]bool{}
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && sim.ValidID(id) && !e.IsDir() {
			ids[id] = true
		}
	}
	h.mu.Lock()
	var added, goneClusters, left []string
	var gone []*node
	for id := range ids {
		if h.byID[id] == nil {
			added = append(added, id)
		}
	}
	for _, n := range h.byID {
		if n.st.Origin == originRecord && !ids[n.st.ID] {
			if n.st.Etcd.Bootstrapped {
				goneClusters = append(goneClusters, n.cluster())
			}
			left = append(left, n.cluster())
			h.dropLocked(n)
			gone = append(gone, n)
		}
	}
	h.mu.Unlock()
	for _, c := range goneClusters {
		h.kube.stop(c, true) // the cluster's bootstrapped node is gone for good
	}
	for _, c := range left {
		h.forgetEtcd(c)
	}
	for _, n := range gone {
		n.saveMu.Lock()
		os.RemoveAll(n.dir)
		n.saveMu.Unlock()
	}
	for _, id := range added {
		if h.ctx.Err() != nil {
			break // closing
		}
		errs = append(errs, h.addRecord(id))
	}
	return errors.Join(errs...)
}

// addRecord powers on the machine of a new record with the user data on
// its disk.
func (h *Host) addRecord(id string) error {
	rec, err := h.store.Get(id)
	if errors.Is(err, sim.ErrNotFound) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return err
	}
	ud, err := h.store.UserData(id)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	hw := ShapeHardware(rec.Shape)
	version := versionOfImage(rec.Image)
	if version == "" {
		version = DefaultVersion
	}
	return h.add(state{
		ID: rec.ID, Origin: originRecord, Name: rec.Name, Hostname: rec.Hostname, Address: rec.Address,
		Platform: h.opts.Platform, CreatedAt: rec.CreatedAt, Version: version, Hardware: &hw,
	}, ud, false)
}
