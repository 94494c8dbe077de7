package ui

import (
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// recordDay records the day of rollingUpgrade and the samples of
// sampledHistory in the rig's store, as the server records them.
func (r *rig) recordDay() {
	r.t.Helper()
	th, mh := rollingUpgrade(), sampledHistory()
	err := r.srv.Store().Update(func(tx store.Tx) error {
		for _, m := range th.Machines {
			for _, t := range m.Transitions {
				if err := history.RecordTransition(tx, th.Tenant, m.Machine, t); err != nil {
					return err
				}
			}
		}
		for _, a := range th.Availability {
			if err := history.RecordAvailability(tx, th.Tenant, a); err != nil {
				return err
			}
		}
		for _, mk := range th.Marks {
			if err := history.RecordMark(tx, th.Tenant, mk); err != nil {
				return err
			}
		}
		for _, s := range mh.Samples {
			if err := history.RecordSamples(tx, th.Tenant, s.At, map[string]schema.MachineSample{mh.Machine: s}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

// TestPagesDrawHistory: from the history in the store, the tenant page
// draws a band per machine with the rollout, the restore and the
// reboots, and the availability bar; the machine page its sparklines and
// its band; the overview each tenant's bar, and a dash for a tenant
// without history. Every part refreshes on its own.
func TestPagesDrawHistory(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.put(fleet("shop", 2, 1)...)
	r.put(fleet("quiet", 1, 0)...)
	r.recordDay()

	page := body(t, r.do("GET", "/tenants/shop", nil, ""), 200)
	contains(t, "tenant page", page, `<section data-part="timeline" data-kinds="Tenant Machine" data-every="60">`,
		`<svg class="history" viewBox="0 0 960 98" width="100%" role="img" data-chart="timeline">`,
		`<g data-band="shop-controlplane-0">`, `<g data-band="shop-controlplane-1">`, `<g data-band="shop-workers-0">`,
		`<rect class="mark-rollout" `, `<rect class="mark-restore" `, `<title>08:09 UTC reboot of shop-controlplane-1</title>`,
		`<svg class="avail" `, `fully available 96.2 % of the last 24 h`)
	if part := body(t, r.do("GET", "/tenants/shop?part=timeline", nil, ""), 200); !strings.HasPrefix(strings.TrimSpace(part), `<section data-part="timeline"`) ||
		!strings.Contains(part, `data-chart="timeline"`) {
		t.Errorf("the timeline part alone:\n%s", part)
	}

	page = body(t, r.do("GET", "/tenants/shop/machines/shop-controlplane-0", nil, ""), 200)
	contains(t, "machine page", page, `<section data-part="gauges" data-kinds="Machine" data-every="60">`,
		`<li data-gauge="load"><strong>load</strong><br><svg class="spark" `, `<li data-gauge="memory">`, `<li data-gauge="etcd DB size">`,
		`<div class="note">load: 0.25 at 11:59 UTC, at most 1.50 at `, `<g data-band="shop-controlplane-0">`)
	page = body(t, r.do("GET", "/tenants/shop/machines/shop-workers-0", nil, ""), 200)
	if strings.Contains(page, "data-gauge") || !strings.Contains(page, `<g data-band="shop-workers-0">`) {
		t.Errorf("a worker without samples: want its band and no sparkline:\n%s", page)
	}
	page = body(t, r.do("GET", "/tenants/quiet/machines/quiet-controlplane-0", nil, ""), 200)
	contains(t, "a machine without history", page, "No history of this machine in the last 24 hours.")

	page = body(t, r.do("GET", "/", nil, ""), 200)
	contains(t, "overview", page, `<th>Last 24 h</th>`, `<td data-label="last 24 h" data-availability><svg class="avail" `, `</svg> 96.2 %</td>`,
		`<td data-label="last 24 h" data-availability><span class="muted">—</span></td>`)
	if strings.Contains(page, " style=") {
		t.Error("the overview carries an inline style, which its Content-Security-Policy refuses")
	}
}
