package ui

import (
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

var update = flag.Bool("update", false, "rewrite the charts' golden files in testdata/charts")

// golden compares got with testdata/charts/NAME, or with -update writes
// it there; got must be well-formed XML either way.
func golden(t *testing.T, name, got string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(got))
	for {
		if _, err := d.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s is not well-formed: %v\n%s", name, err, got)
		}
	}
	path := filepath.Join("testdata", "charts", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s changed:\ngot  %s\nwant %s\n(go test -run %s -update rewrites it, after a look)", name, got, want, t.Name())
	}
}

// day is the last 24 h before testNow.
var day = span{Since: testNow.Add(-24 * time.Hour), Until: testNow}

// sampledHistory is a control plane's day: a sample a minute for the
// last two hours but for a ten-minute hole, and hourly means before (so
// that its Step is the hour, as package history answers).
func sampledHistory() schema.MachineHistory {
	h := schema.MachineHistory{Tenant: "shop", Machine: "shop-controlplane-0", Since: day.Since, Until: day.Until, Step: 3600}
	for i := 24; i > 2; i-- {
		at := testNow.Add(-time.Duration(i) * time.Hour)
		h.Samples = append(h.Samples, schema.MachineSample{At: at, Load1: 0.5 + float64(i%5)/10,
			MemoryUsedBytes: uint64(2+i%3) << 30, MemoryTotalBytes: 8 << 30, EtcdDBSizeBytes: int64(20+i) << 20})
	}
	for m := 120; m > 0; m-- {
		if m > 40 && m <= 50 {
			continue // the machine did not answer
		}
		at := testNow.Add(-time.Duration(m) * time.Minute)
		h.Samples = append(h.Samples, schema.MachineSample{At: at, Load1: float64(m%7) / 4,
			MemoryUsedBytes: uint64(3<<30 + m<<20), MemoryTotalBytes: 8 << 30, EtcdDBSizeBytes: 45<<20 + int64(120-m)<<16, EtcdLeader: m < 30})
	}
	return h
}

// TestSparklines: a machine's gauges draw as one line each, broken where
// samples are missing, with the last and largest value in their title;
// a worker has no etcd line, and a machine without samples says so.
func TestSparklines(t *testing.T) {
	h := sampledHistory()
	g := gauges(h)
	if len(g) != 3 {
		t.Fatalf("%d sparklines of a control plane, want load, memory and etcd", len(g))
	}
	for _, s := range g {
		golden(t, "spark-"+strings.ReplaceAll(s.Name, " ", "-")+".svg", string(s.svg(day)))
	}
	load := string(g[0].svg(day))
	// The hourly means and the minutes before the hole draw one stretch, the minutes after it another.
	if n := strings.Count(load, "M"); n != 1+2 { // the baseline, then two stretches
		t.Errorf("the load line has %d moves, want 3 (baseline + 2 stretches):\n%s", n, load)
	}
	contains(t, "load", load, "<title>load: 0.25 at 11:59 UTC, at most 1.50 at ")
	contains(t, "memory", string(g[1].svg(day)), "memory: 3.0 GiB at 11:59 UTC, at most 4.0 GiB at ")

	for i := range h.Samples {
		h.Samples[i].EtcdDBSizeBytes = 0
	}
	if g := gauges(h); len(g) != 2 {
		t.Errorf("%d sparklines of a worker, want load and memory", len(g))
	}
	empty := string(gauges(schema.MachineHistory{Step: 60})[0].svg(day))
	golden(t, "spark-empty.svg", empty)
	if strings.Contains(empty, "spark-line") {
		t.Errorf("a sparkline without samples draws a line:\n%s", empty)
	}
	lone := sparkline{Name: "load", Step: time.Minute, Format: g[0].Format, Points: []point{{At: testNow.Add(-time.Hour), V: 1}}}
	contains(t, "a lone sample", string(lone.svg(day)), `<circle class="spark-dot" cx="228.2" cy="2.0" r="2"/>`)
}

// rollingUpgrade is a tenant's day: three machines up since before it, a
// rolling upgrade this morning that rebooted each in turn, a worker that
// stopped answering for a while, and a restore under way.
func rollingUpgrade() schema.TenantHistory {
	at := func(h, m int) time.Time { return time.Date(2026, 11, 30, h, m, 0, 0, time.UTC) }
	up := func(t time.Time) schema.MachineTransition {
		return schema.MachineTransition{At: t, Stage: schema.StageReady, Ready: true, Connected: true, ConfigUpToDate: true}
	}
	rebooted := func(name string, h, m int) []schema.MachineTransition {
		return []schema.MachineTransition{
			{At: at(h, m), Stage: schema.StageUpdating, Connected: true},
			{At: at(h, m+2), Stage: schema.StageRestarting},
			{At: at(h, m+4), Stage: schema.StageConfiguring, Connected: true, ConfigUpToDate: true},
			up(at(h, m+6)),
		}
	}
	h := schema.TenantHistory{Tenant: "shop", Since: day.Since, Until: day.Until,
		Availability: []schema.TenantAvailability{
			{At: at(1, 0).Add(-24 * time.Hour), Ready: 3, Desired: 3, APIReady: true},
			{At: at(8, 0), Ready: 2, Desired: 3, APIReady: true},
			{At: at(8, 20), Ready: 3, Desired: 3, APIReady: true},
			{At: at(9, 30), Ready: 2, Desired: 3, APIReady: true},
			{At: at(10, 0), Ready: 0, Desired: 3},
			{At: at(10, 5), Ready: 3, Desired: 3, APIReady: true},
		},
		Marks: []schema.HistoryMark{
			{At: at(8, 0), Kind: schema.MarkRolloutStarted, Message: "Talos 1.12.6 to 1.13.0"},
			{At: at(8, 2), Kind: schema.MarkReboot, Machine: "shop-controlplane-0"},
			{At: at(8, 9), Kind: schema.MarkReboot, Machine: "shop-controlplane-1"},
			{At: at(8, 16), Kind: schema.MarkReboot, Machine: "shop-workers-0"},
			{At: at(8, 20), Kind: schema.MarkRolloutFinished},
			{At: at(11, 30), Kind: schema.MarkRestoreStarted, Message: "from 20261130T110000Z"},
		},
	}
	h.Machines = []schema.MachineTimeline{
		{Machine: "shop-controlplane-0", Transitions: append([]schema.MachineTransition{up(at(1, 0).Add(-30 * time.Hour))}, rebooted("cp0", 8, 0)...)},
		{Machine: "shop-controlplane-1", Transitions: append([]schema.MachineTransition{up(at(1, 0).Add(-30 * time.Hour))}, rebooted("cp1", 8, 7)...)},
		{Machine: "shop-workers-0", Transitions: append(append([]schema.MachineTransition{up(at(1, 0).Add(-30 * time.Hour))}, rebooted("w0", 8, 14)...),
			schema.MachineTransition{At: at(9, 30), Stage: schema.StageReady},
			up(at(10, 5)))},
	}
	return h
}

// TestTimeline: the tenant's timeline has a band per machine coloured
// by stage from the span's start (a state from before it included),
// the rollout and the restore under way as stretches, and a reboot tick
// on each machine's band.
func TestTimeline(t *testing.T) {
	h := rollingUpgrade()
	svg := string(timeline(h, day))
	golden(t, "timeline.svg", svg)
	contains(t, "timeline", svg,
		`<text class="band-name" x="212.0" y="31.0">shop-controlplane-0</text>`,
		`<rect class="mark-rollout" `, `<title>08:00 UTC rollout started: Talos 1.12.6 to 1.13.0; 08:20 UTC rollout finished</title>`,
		`<rect class="mark-restore" `, `<title>11:30 UTC restore started: from 20261130T110000Z; under way</title>`,
		`<title>08:02 UTC reboot of shop-controlplane-0</title>`,
		`<title>shop-workers-0 09:30–10:05 UTC: ready, no answer, not ready</title>`, `<title>shop-controlplane-0 Nov 28 19:00–08:00 UTC: ready</title>`,
		`class="stage-ready band-lost"`,
		`<title>shop-controlplane-0 08:02–08:04 UTC: restarting, no answer, not ready</title>`,
		`>00:00</text>`, `>06:00</text>`)
	if n := strings.Count(svg, `class="mark-reboot"`); n != 3 {
		t.Errorf("%d reboot ticks, want 3", n)
	}
	// The first band starts at the span's start: its state from before it.
	if !strings.Contains(svg, `<rect class="stage-ready" x="220.0" y="20.0" `) {
		t.Errorf("the first machine's band does not start at the span's start:\n%s", svg)
	}
}

// TestAvailabilityBar: the overview's bar colours each stretch by how
// available the tenant was and counts the share of the day it was fully
// available.
func TestAvailabilityBar(t *testing.T) {
	a := availabilityBar(rollingUpgrade().Availability, day)
	golden(t, "availability.svg", string(a.Bar))
	// Not fully available 08:00–08:20 and 09:30–10:05: 55 minutes of 1,440.
	if want := 100 * float64(24*60-55) / (24 * 60); a.Full != want || a.Known != 100 {
		t.Errorf("full %.3f%% known %.3f%%, want %.3f%% and 100%%", a.Full, a.Known, want)
	}
	contains(t, "bar", string(a.Bar), `class="cond-busy"`, `class="cond-bad"`, `<title>10:00–10:05 UTC: 0 of 3 machines ready, API does not answer</title>`)
	none := availabilityBar(nil, day)
	if none.Known != 0 || strings.Contains(string(none.Bar), "cond-") {
		t.Errorf("a tenant without history: %+v", none)
	}
}

// TestTimelineZoom: a history younger than the window fills the chart
// (its first record at the left edge, ticks every 30 s), one that began
// before the window keeps it, and the span never gets shorter than
// minSpan.
func TestTimelineZoom(t *testing.T) {
	start := testNow.Add(-3*time.Minute - 20*time.Second)
	h := schema.TenantHistory{Tenant: "young", Machines: []schema.MachineTimeline{{Machine: "young-cp-0", Transitions: []schema.MachineTransition{
		{At: start, Stage: schema.StageInstalling, Connected: true},
		{At: start.Add(40 * time.Second), Stage: schema.StageReady, Ready: true, Connected: true, ConfigUpToDate: true}}}},
		Marks: []schema.HistoryMark{{At: start.Add(time.Minute), Kind: schema.MarkRolloutStarted}, {At: start.Add(2 * time.Minute), Kind: schema.MarkRolloutFinished}}}
	sp := zoom(day, start, start.Add(time.Minute))
	if !sp.Since.Equal(start) || sp.length() != "3 min" {
		t.Errorf("zoomed to %v (%s), want from %v", sp.Since, sp.length(), start)
	}
	svg := string(timeline(h, sp))
	golden(t, "timeline-young.svg", svg)
	contains(t, "young timeline", svg, `<rect class="stage-busy" x="220.0" y="20.0" width="147.2" `, `>11:57:00</text>`, `>11:59:30</text>`,
		`<title>young-cp-0 11:56:40–11:57:20 UTC: installing, not ready, config outdated</title>`)
	if got := zoom(day, start, testNow.Add(-25*time.Hour)); got != day {
		t.Errorf("a history from before the window zoomed to %v", got)
	}
	if got := zoom(day, testNow.Add(-time.Second)); got.Until.Sub(got.Since) != minSpan {
		t.Errorf("a history of a second shows %v, want %v", got.Until.Sub(got.Since), minSpan)
	}
	if got := zoom(day); got != day || day.length() != "24 h" {
		t.Errorf("no history: %v, %s", got, day.length())
	}
}
