package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// machineDoc is the part of a stored Machine that events are derived from.
type machineDoc struct {
	Metadata struct {
		Name      string    `json:"name"`
		UpdatedAt time.Time `json:"updatedAt"`
	} `json:"metadata"`
	Spec struct {
		Hostname  string `json:"hostname"`
		Tenant    string `json:"tenant"`
		NodeGroup string `json:"nodeGroup"`
		TFAddress string `json:"tfAddress"`
	} `json:"spec"`
	Status struct {
		Stage      schema.MachineStage `json:"stage"`
		Ready      bool                `json:"ready"`
		Connected  bool                `json:"connected"`
		LastError  string              `json:"lastError"`
		Message    string              `json:"message"`
		Kubernetes *struct {
			Ready bool `json:"ready"`
		} `json:"kubernetes"`
	} `json:"status"`
}

// notReady reports whether the machine counts as not ready, as its
// tenant's status counts it: not in stage ready, or its Node not Ready.
// A machine never observed (no stage) or being removed does not count.
func (m *machineDoc) notReady() bool {
	st := &m.Status
	switch st.Stage {
	case "", schema.StageRemoving:
		return false
	case schema.StageReady:
		return st.Kubernetes != nil && !st.Ready
	}
	return true
}

// label names the machine as people know it: its host name, else its TF
// address, else its id.
func (m *machineDoc) label() string {
	return cmpOr(m.Spec.Hostname, cmpOr(m.Spec.TFAddress, m.Metadata.Name))
}

// why says in a few words why the machine is not ready.
func (m *machineDoc) why() string {
	st := &m.Status
	s := "stage " + string(st.Stage)
	switch {
	case !st.Connected && st.LastError != "":
		s += ", not answering: " + st.LastError
	case st.Kubernetes != nil && !st.Ready:
		s += ", its Kubernetes node is not Ready"
	case st.Message != "":
		s += ": " + st.Message
	}
	return s
}

// machine is what the deriver keeps of one machine.
type machine struct {
	tenant, label, group string
	// id and tfAddress are other names messages may give the machine.
	id, tfAddress string
	// since is when the machine was first seen not ready; zero while it
	// is ready.
	since time.Time
	why   string
	// told: MachineNotReady was told of this time it is not ready.
	told bool
}

// toldPrefix is where, in the store's series area, the deriver records
// each machine whose MachineNotReady was told, until the machine is ready
// again or gone, so that a restart tells again only of machines it was
// not told of.
const toldPrefix = "events/machine-not-ready/"

// loadTold returns the machines whose MachineNotReady was told, as
// recorded in the store.
func loadTold(tx store.Tx) (map[string]bool, error) {
	told := map[string]bool{}
	err := tx.ScanSeries(toldPrefix, func(key string, _ []byte) error {
		told[strings.TrimPrefix(key, toldPrefix)] = true
		return nil
	})
	return told, err
}

// loadMachine keeps a stored machine as the state to compare with. One
// that is not ready counts from its status's last change; it was told of
// when told records so, and is told of once its time is up otherwise,
// also when that time passed while no server ran.
func (d *Deriver) loadMachine(r store.Resource, now time.Time, told map[string]bool) error {
	var doc machineDoc
	if err := json.Unmarshal(r.Object, &doc); err != nil {
		return fmt.Errorf("machine %s: %w", r.Name, err)
	}
	m := &machine{}
	m.see(&doc, now)
	if !m.since.IsZero() {
		if !doc.Metadata.UpdatedAt.IsZero() && doc.Metadata.UpdatedAt.Before(now) {
			m.since = doc.Metadata.UpdatedAt
		}
		m.told = told[r.Name]
	}
	d.machines[r.Name] = m
	return nil
}

// recordTold records in the store that MachineNotReady was told of the
// machines names (told) or that they are ready again or gone (not told).
// A failed write is logged: a restart may then tell once more, or not.
func (d *Deriver) recordTold(names []string, told bool) {
	if len(names) == 0 {
		return
	}
	at := []byte(d.opts.Clock.Now().UTC().Format(time.RFC3339Nano))
	err := d.opts.Store.Update(func(tx store.Tx) error {
		for _, name := range names {
			var err error
			if told {
				err = tx.PutSeries(toldPrefix+name, at)
			} else {
				err = tx.DeleteSeries(toldPrefix + name)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		d.log.Warn("record which machines MachineNotReady told of", "machines", len(names), "told", told, "err", err)
	}
}

// see records what doc shows of the machine at now.
func (m *machine) see(doc *machineDoc, now time.Time) {
	m.tenant, m.label, m.group = doc.Spec.Tenant, doc.label(), doc.Spec.NodeGroup
	m.id, m.tfAddress = doc.Metadata.Name, doc.Spec.TFAddress
	switch {
	case !doc.notReady():
		m.since, m.told, m.why = time.Time{}, false, ""
	case m.since.IsZero():
		m.since, m.why = now, doc.why()
	default:
		m.why = doc.why()
	}
}

// machineChanged follows a change of a machine; MachineNotReady is told
// by checkMachines, when the machine's time is up.
func (d *Deriver) machineChanged(c store.Change) ([]notify.Event, error) {
	name := c.Resource.Name
	if c.Type == store.Deleted {
		if m := d.machines[name]; m != nil && m.told {
			d.recordTold([]string{name}, false)
		}
		delete(d.machines, name)
		d.planChecks()
		return nil, nil
	}
	var doc machineDoc
	if err := json.Unmarshal(c.Resource.Object, &doc); err != nil {
		return nil, err
	}
	m := d.machines[name]
	if m == nil {
		m = &machine{}
		d.machines[name] = m
	}
	was, wasTold := m.since, m.told
	m.see(&doc, d.opts.Clock.Now())
	if wasTold && !m.told {
		d.recordTold([]string{name}, false)
	}
	if !m.since.Equal(was) {
		d.planChecks()
	}
	return d.checkMachines(), nil
}

// checkMachines tells of every machine that has been not ready for longer
// than the threshold, once, and plans the next check.
func (d *Deriver) checkMachines() []notify.Event {
	if d.nextCheck.IsZero() {
		return nil
	}
	now, after := d.opts.Clock.Now(), d.opts.MachineNotReadyAfter
	if now.Before(d.nextCheck) {
		return nil
	}
	var out []notify.Event
	var told []string
	defer func() { d.recordTold(told, true) }()
	for name, m := range d.machines {
		if m.since.IsZero() || m.told || now.Sub(m.since) < after {
			continue
		}
		m.told = true
		told = append(told, name)
		t := d.tenants[m.tenant]
		if t == nil {
			t = &tenant{name: m.tenant}
		}
		if t.removing {
			continue
		}
		msg := fmt.Sprintf("machine %s (node group %s) has not been ready for %s: %s", m.label, m.group, now.Sub(m.since).Round(time.Second), m.why)
		out = append(out, d.tenantEvent(t, notify.MachineNotReady, notify.SeverityError, m.label, msg, now))
	}
	sortEvents(out)
	d.planChecks()
	return out
}

// machineLabel is the label (host name) of tenant's machine that a
// message names by its id or TF address; name itself when no machine has
// it.
func (d *Deriver) machineLabel(tenant, name string) string {
	for _, m := range d.machines {
		if m.tenant == tenant && (m.id == name || m.tfAddress == name) {
			return m.label
		}
	}
	return name
}

// planChecks sets nextCheck to when the first machine not ready and not
// told of is due.
func (d *Deriver) planChecks() {
	d.nextCheck = time.Time{}
	for _, m := range d.machines {
		if m.since.IsZero() || m.told {
			continue
		}
		if due := m.since.Add(d.opts.MachineNotReadyAfter); d.nextCheck.IsZero() || due.Before(d.nextCheck) {
			d.nextCheck = due
		}
	}
}
