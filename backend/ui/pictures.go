package ui

import (
	"cmp"
	"errors"
	"html/template"
	"time"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// pictureWindow is how far back the pages' pictures look.
const pictureWindow = 24 * time.Hour

// gaugeView is one sparkline of a page, with its summary in words.
type gaugeView struct {
	Name    string
	SVG     template.HTML
	Summary string
}

// machinePictures is what the machine page draws of a machine's last
// day: its gauges (none without samples) and its band of stages.
type machinePictures struct {
	// Shown is how long a stretch the pictures show, in words: the
	// window, or less for a machine whose history began within it.
	Shown    string
	Gauges   []gaugeView
	Timeline template.HTML
	// HistoryProblem says why the history could not be read.
	HistoryProblem string
}

// drawMachine draws a machine's history over sp; its band is named
// label.
func drawMachine(h schema.MachineHistory, label string, sp span) machinePictures {
	var firsts []time.Time
	if len(h.Transitions) > 0 {
		firsts = append(firsts, h.Transitions[0].At)
	}
	if len(h.Samples) > 0 {
		firsts = append(firsts, h.Samples[0].At)
	}
	sp = zoom(sp, firsts...)
	p := machinePictures{Shown: sp.length()}
	if len(h.Samples) > 0 {
		for _, g := range gauges(h) {
			p.Gauges = append(p.Gauges, gaugeView{Name: g.Name, SVG: g.svg(sp), Summary: g.summary(sp)})
		}
	}
	if len(h.Transitions) > 0 {
		p.Timeline = timeline(schema.TenantHistory{Tenant: h.Tenant, Since: h.Since, Until: h.Until,
			Machines: []schema.MachineTimeline{{Machine: label, Transitions: h.Transitions}}}, sp)
	}
	return p
}

// tenantPictures is what the tenant page draws of a tenant's last day.
type tenantPictures struct {
	// Shown is how long a stretch the pictures show, in words.
	Shown    string
	Timeline template.HTML
	Avail    availability
	// HistoryProblem says why the history could not be read.
	HistoryProblem string
}

// drawTenant reads a tenant's history over sp and draws it; a history
// that cannot be read is logged and said on the page, which shows the
// rest.
func (h *handler) drawTenant(tx store.Tx, tenant string, machines []schema.Machine, sp span) tenantPictures {
	hist, err := tenantHistory(tx, tenant, sp)
	if err != nil {
		h.log.Error("dashboard: tenant history", "tenant", tenant, "err", err)
		return tenantPictures{HistoryProblem: "The tenant's history could not be read; the server log has the details."}
	}
	hist.Machines, hist.Marks = bands(hist, machines)
	sp = zoom(sp, firstRecords(hist)...)
	p := tenantPictures{Shown: sp.length()}
	if len(hist.Machines) > 0 {
		p.Timeline = timeline(hist, sp)
	}
	p.Avail = availabilityBar(hist.Availability, sp)
	return p
}

// firstRecords are the times of the first record of each series of h.
func firstRecords(h schema.TenantHistory) []time.Time {
	var out []time.Time
	for _, m := range h.Machines {
		if len(m.Transitions) > 0 {
			out = append(out, m.Transitions[0].At)
		}
	}
	if len(h.Availability) > 0 {
		out = append(out, h.Availability[0].At)
	}
	if len(h.Marks) > 0 {
		out = append(out, h.Marks[0].At)
	}
	return out
}

// bands orders a tenant's timelines as the machines (as the page lists
// them) and names each by its host name, in its marks too; machines no
// longer there are left out, and so are their marks.
func bands(h schema.TenantHistory, machines []schema.Machine) ([]schema.MachineTimeline, []schema.HistoryMark) {
	byName := make(map[string]schema.MachineTimeline, len(h.Machines))
	for _, m := range h.Machines {
		byName[m.Machine] = m
	}
	label := make(map[string]string, len(machines))
	var out []schema.MachineTimeline
	for _, m := range machines {
		name := m.Metadata.Name
		label[name] = cmp.Or(m.Spec.Hostname, name)
		if tl, ok := byName[name]; ok {
			tl.Machine = label[name]
			out = append(out, tl)
		}
	}
	var marks []schema.HistoryMark
	for _, mk := range h.Marks {
		if mk.Machine != "" {
			l, ok := label[mk.Machine]
			if !ok {
				continue
			}
			mk.Machine = l
		}
		marks = append(marks, mk)
	}
	return out, marks
}

// machineHistory reads a machine's history over sp; a machine without
// any has an empty one.
func machineHistory(tx store.Tx, tenant, machine string, sp span) (schema.MachineHistory, error) {
	h, err := history.Machine(tx, tenant, machine, history.Query{Since: sp.Since, Until: sp.Until})
	if errors.Is(err, store.ErrNotFound) {
		return h, nil
	}
	return h, err
}

// tenantHistory reads a tenant's history over sp.
func tenantHistory(tx store.Tx, tenant string, sp span) (schema.TenantHistory, error) {
	return history.Tenant(tx, tenant, history.Query{Since: sp.Since, Until: sp.Until})
}
