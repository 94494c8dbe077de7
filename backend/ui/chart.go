package ui

// The dashboard's pictures, drawn on the server as inline SVG: sparklines
// of a machine's gauges, a tenant's availability timeline (one band per
// machine, coloured by stage) and the small availability bar of the
// overview. They need no script and no inline style (colours come from
// classes in app.css, shapes from SVG attributes), so they live within
// the page's Content-Security-Policy; each shape carries a <title> that
// browsers show on hover, and each chart a text summary beside it. Same
// input, same bytes: coordinates are printed with one decimal.

import (
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/rezuscloud/rezuscloud/schema"
)

// span is the stretch of time a chart shows.
type span struct {
	Since, Until time.Time
}

// x maps t into [x0, x0+w] of a chart showing s, clamped to it.
func (s span) x(t time.Time, x0, w float64) float64 {
	total := s.Until.Sub(s.Since)
	if total <= 0 {
		return x0
	}
	f := float64(t.Sub(s.Since)) / float64(total)
	return x0 + w*min(max(f, 0), 1)
}

// num prints a coordinate: one decimal, no trailing ".0".
func num(v float64) string {
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// clock prints t in UTC as the charts' titles give it: a time of day,
// to the second on a span shorter than an hour, with its date when that
// is not the date of the span's end.
func (s span) clock(t time.Time) string {
	t, ref := t.UTC(), s.Until.UTC()
	layout := "15:04"
	if s.Until.Sub(s.Since) < time.Hour {
		layout = "15:04:05"
	}
	if y, m, d := t.Date(); y != ref.Year() || m != ref.Month() || d != ref.Day() {
		layout = "Jan 2 " + layout
	}
	return t.Format(layout)
}

// esc escapes text for an SVG element or attribute.
func esc(s string) string { return template.HTMLEscapeString(s) }

// point is one value of a series at a time.
type point struct {
	At time.Time
	V  float64
}

// sparkline is one gauge over a span.
type sparkline struct {
	// Name says what it shows ("load", "memory"); Top is the value at
	// the top of the chart, or 0 for the largest of Points.
	Name   string
	Top    float64
	Points []point
	// Step is the samples' resolution. The line bridges a stretch
	// between two points of up to 2.5 times the larger of Step and the
	// spacing of their neighbours (so that hourly means before the
	// last day join the minutes after them); a longer one (the machine
	// did not answer) breaks it.
	Step time.Duration
	// Format prints a value for the summary.
	Format func(float64) string
}

// Size of a sparkline, in SVG units (and CSS pixels).
const (
	sparkW = 240
	sparkH = 36
)

// svg draws s over sp: a line, broken where samples are missing, under
// a title that gives the last value and the largest.
func (s sparkline) svg(sp span) template.HTML {
	top := s.Top
	for _, p := range s.Points {
		top = max(top, p.V)
	}
	if top <= 0 {
		top = 1
	}
	var d, dots strings.Builder
	for i, p := range s.Points {
		x, y := sp.x(p.At, 2, sparkW-4), 2+(sparkH-4)*(1-min(p.V/top, 1))
		switch {
		case (i == 0 || s.broken(i)) && (i+1 == len(s.Points) || s.broken(i+1)):
			fmt.Fprintf(&dots, `<circle class="spark-dot" cx="%s" cy="%s" r="2"/>`, num(x), num(y)) // a lone sample
		case i == 0 || s.broken(i):
			fmt.Fprintf(&d, "M%s %s", num(x), num(y))
		default:
			fmt.Fprintf(&d, "L%s %s", num(x), num(y))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" data-chart="%s">`,
		sparkW, sparkH, sparkW, sparkH, esc(s.Name))
	fmt.Fprintf(&b, `<title>%s</title>`, esc(s.summary(sp)))
	fmt.Fprintf(&b, `<path class="spark-base" d="M0 %d H%d"/>`, sparkH-1, sparkW)
	if d.Len() > 0 {
		fmt.Fprintf(&b, `<path class="spark-line" d="%s"/>`, d.String())
	}
	b.WriteString(dots.String())
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// broken reports whether the line breaks between points i-1 and i.
func (s sparkline) broken(i int) bool {
	pts := s.Points
	ref := s.Step
	if i >= 2 {
		ref = max(ref, pts[i-1].At.Sub(pts[i-2].At))
	}
	if i+1 < len(pts) {
		ref = max(ref, pts[i+1].At.Sub(pts[i].At))
	}
	return pts[i].At.Sub(pts[i-1].At) > ref*5/2
}

// summary says the last value and the largest in words, at times of sp.
func (s sparkline) summary(sp span) string {
	if len(s.Points) == 0 {
		return s.Name + ": no samples"
	}
	last, peak := s.Points[len(s.Points)-1], s.Points[0]
	for _, p := range s.Points {
		if p.V > peak.V {
			peak = p
		}
	}
	return fmt.Sprintf("%s: %s at %s UTC, at most %s at %s UTC", s.Name, s.Format(last.V), sp.clock(last.At), s.Format(peak.V), sp.clock(peak.At))
}

// Size of a timeline, in SVG units: a column of machine names, then the
// bands, and a row of hour ticks under them.
const (
	timelineW      = 960
	timelineLabelW = 220
	bandH          = 14
	bandGap        = 6
	axisH          = 18
)

// timeline draws a tenant's history over sp: a lane of rollouts and
// restores on top, then one band per machine, coloured by stage (faded
// while the server had no answer from it) with a tick at each reboot;
// the edges of each rollout and restore run down across the bands.
func timeline(h schema.TenantHistory, sp span) template.HTML {
	plotX, plotW := float64(timelineLabelW), float64(timelineW-timelineLabelW-4)
	lane := bandH + bandGap
	bandsH := float64((len(h.Machines) + 1) * lane)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="history" viewBox="0 0 %d %d" width="100%%" role="img" data-chart="timeline">`, timelineW, int(bandsH)+axisH)
	fmt.Fprintf(&b, `<title>Machines of %s by stage, %s to %s UTC</title>`, esc(h.Tenant), sp.clock(sp.Since), sp.clock(sp.Until))
	fmt.Fprintf(&b, `<text class="band-name" x="%s" y="%d">rollouts, restores</text>`, num(plotX-8), bandH-3)
	fmt.Fprintf(&b, `<rect class="band-none" x="%s" y="0" width="%s" height="%d"/>`, num(plotX), num(plotW), bandH)
	st := stretches(h.Marks, sp)
	for _, s := range st {
		x0, x1 := sp.x(s.from, plotX, plotW), sp.x(s.to, plotX, plotW)
		fmt.Fprintf(&b, `<rect class="mark-%s" x="%s" y="0" width="%s" height="%d"><title>%s</title></rect>`,
			s.kind, num(x0), num(max(x1-x0, 1)), bandH, esc(s.title))
	}
	for i, m := range h.Machines {
		y := float64((i + 1) * lane)
		fmt.Fprintf(&b, `<text class="band-name" x="%s" y="%s">%s</text>`, num(plotX-8), num(y+bandH-3), esc(m.Machine))
		fmt.Fprintf(&b, `<g data-band="%s">`, esc(m.Machine))
		band(&b, m, sp, y, plotX, plotW)
		for _, mk := range h.Marks {
			if mk.Kind == schema.MarkReboot && mk.Machine == m.Machine && inSpan(mk.At, sp) {
				x := sp.x(mk.At, plotX, plotW)
				fmt.Fprintf(&b, `<path class="mark-reboot" d="M%s %s v%d"><title>%s</title></path>`, num(x), num(y-2), bandH+4, esc(markTitle(mk, sp)))
			}
		}
		b.WriteString(`</g>`)
	}
	for _, s := range st {
		for _, t := range []time.Time{s.from, s.to} {
			if t.After(sp.Since) && t.Before(sp.Until) {
				fmt.Fprintf(&b, `<path class="edge-%s" d="M%s 0 V%s"/>`, s.kind, num(sp.x(t, plotX, plotW)), num(bandsH-bandGap))
			}
		}
	}
	axis(&b, sp, bandsH, plotX, plotW)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// band draws one machine's stretches of state.
func band(b *strings.Builder, m schema.MachineTimeline, sp span, y, plotX, plotW float64) {
	fmt.Fprintf(b, `<rect class="band-none" x="%s" y="%s" width="%s" height="%d"/>`, num(plotX), num(y), num(plotW), bandH)
	for i, t := range m.Transitions {
		end := sp.Until
		if i+1 < len(m.Transitions) {
			end = m.Transitions[i+1].At
		}
		if !end.After(sp.Since) || !t.At.Before(sp.Until) || !end.After(t.At) {
			continue
		}
		x0, x1 := sp.x(t.At, plotX, plotW), sp.x(end, plotX, plotW)
		class := stageClass(t.Stage)
		if !t.Connected {
			class += " band-lost"
		}
		fmt.Fprintf(b, `<rect class="%s" x="%s" y="%s" width="%s" height="%d"><title>%s</title></rect>`,
			class, num(x0), num(y), num(max(x1-x0, 0.5)), bandH, esc(stateTitle(m.Machine, t, end, sp)))
	}
}

// stateTitle says what a machine was from t.At to end.
func stateTitle(machine string, t schema.MachineTransition, end time.Time, sp span) string {
	return fmt.Sprintf("%s %s–%s UTC: %s", machine, sp.clock(t.At), sp.clock(end), t.Words())
}

// markTitle says what a mark is, at a time of sp.
func markTitle(m schema.HistoryMark, sp span) string {
	s := sp.clock(m.At) + " UTC " + schema.MarkWords(m.Kind)
	if m.Machine != "" {
		s += " of " + m.Machine
	}
	if m.Message != "" {
		s += ": " + m.Message
	}
	return s
}

// stretch is a rollout or a restore, from its start to its end (or the
// end of the span while it lasts).
type stretch struct {
	kind     string // "rollout" or "restore"
	from, to time.Time
	title    string
}

// stretches pairs the marks' starts and ends into stretches that
// overlap sp; an end without a start began before the span.
func stretches(marks []schema.HistoryMark, sp span) []stretch {
	var out []stretch
	open := map[string]*schema.HistoryMark{}
	add := func(kind string, start *schema.HistoryMark, end time.Time, endTitle string) {
		from, title := sp.Since, "before "+sp.clock(sp.Since)+" UTC"
		if start != nil {
			from, title = start.At, markTitle(*start, sp)
		}
		if end.After(sp.Since) && from.Before(sp.Until) {
			out = append(out, stretch{kind: kind, from: from, to: end, title: title + "; " + endTitle})
		}
	}
	for i := range marks {
		m := &marks[i]
		switch m.Kind {
		case schema.MarkRolloutStarted:
			open["rollout"] = m
		case schema.MarkRestoreStarted:
			open["restore"] = m
		case schema.MarkRolloutFinished, schema.MarkRestoreFinished:
			kind := strings.TrimSuffix(strings.TrimSuffix(m.Kind, "Finished"), "Started")
			add(kind, open[kind], m.At, markTitle(*m, sp))
			delete(open, kind)
		}
	}
	for _, kind := range []string{"rollout", "restore"} {
		if m := open[kind]; m != nil {
			add(kind, m, sp.Until, "under way")
		}
	}
	slices.SortStableFunc(out, func(a, b stretch) int { return a.from.Compare(b.from) })
	return out
}

func inSpan(t time.Time, sp span) bool { return !t.Before(sp.Since) && !t.After(sp.Until) }

// tickSteps are the steps the axis may take, the finest first.
var tickSteps = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute,
	30 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour}

// maxTicks is how many ticks the axis has at most.
const maxTicks = 8

// axis draws ticks under the bands, labelled in UTC: every six hours on
// a day, finer on a shorter span, no more than maxTicks.
func axis(b *strings.Builder, sp span, y, plotX, plotW float64) {
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if sp.Until.Sub(sp.Since)/s < maxTicks {
			step = s
			break
		}
	}
	layout := "15:04"
	if step < time.Minute {
		layout = "15:04:05"
	}
	fmt.Fprintf(b, `<path class="axis" d="M%s %s H%s"/>`, num(plotX), num(y), num(plotX+plotW))
	for t := sp.Since.UTC().Truncate(step); !t.After(sp.Until); t = t.Add(step) {
		if t.Before(sp.Since) {
			continue
		}
		x := sp.x(t, plotX, plotW)
		fmt.Fprintf(b, `<path class="axis" d="M%s %s v4"/><text class="tick" x="%s" y="%s">%s</text>`,
			num(x), num(y), num(x), num(y+axisH-3), t.Format(layout))
	}
}

// minSpan is the shortest span a chart shows.
const minSpan = 10 * time.Second

// zoom narrows sp to start at the earliest of firsts (the first record
// of each series a chart draws) when all of them fall inside it: a
// history younger than the span fills the chart instead of a sliver at
// its end. Zero times are left out; the span stays minSpan at least.
func zoom(sp span, firsts ...time.Time) span {
	var earliest time.Time
	for _, t := range firsts {
		if t.IsZero() {
			continue
		}
		if !t.After(sp.Since) {
			return sp
		}
		if earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	if earliest.IsZero() {
		return sp
	}
	sp.Since = earlier(earliest, sp.Until.Add(-minSpan))
	return sp
}

// length says how long sp is, in words: "24 h", "3 h 20 min", "45 s".
func (s span) length() string {
	d := s.Until.Sub(s.Since).Round(time.Second)
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Hour:
		return fmt.Sprintf("%d h %d min", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	}
	return strconv.Itoa(int(d/time.Second)) + " s"
}

// Size of the overview's availability bar.
const (
	availW = 120
	availH = 12
)

// availability is a tenant's availability over a span, for the
// overview's bar.
type availability struct {
	Bar template.HTML
	// Full is the share of the span, in percent, in which every desired
	// machine was ready and the API answered; Known the share with a
	// record at all.
	Full, Known float64
}

// availabilityBar draws a's entries over sp: green while every desired
// machine is ready and the Kubernetes API answers, amber while some are,
// red while none is or the API does not answer, grey while none is
// desired or nothing is known.
func availabilityBar(a []schema.TenantAvailability, sp span) availability {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="avail" viewBox="0 0 %d %d" width="%d" height="%d" role="img" data-chart="availability">`, availW, availH, availW, availH)
	fmt.Fprintf(&b, `<rect class="band-none" x="0" y="0" width="%d" height="%d"/>`, availW, availH)
	var full, known time.Duration
	for i, e := range a {
		end := sp.Until
		if i+1 < len(a) {
			end = a[i+1].At
		}
		from := later(e.At, sp.Since)
		if !end.After(from) || !from.Before(sp.Until) {
			continue
		}
		end = earlier(end, sp.Until)
		known += end.Sub(from)
		class := availClass(e)
		if class == "cond-good" {
			full += end.Sub(from)
		}
		x0, x1 := sp.x(from, 0, availW), sp.x(end, 0, availW)
		fmt.Fprintf(&b, `<rect class="%s" x="%s" y="0" width="%s" height="%d"><title>%s</title></rect>`,
			class, num(x0), num(max(x1-x0, 0.5)), availH, esc(availTitle(e, from, end, sp)))
	}
	b.WriteString(`</svg>`)
	out := availability{Bar: template.HTML(b.String())}
	if total := sp.Until.Sub(sp.Since); total > 0 {
		out.Full, out.Known = 100*float64(full)/float64(total), 100*float64(known)/float64(total)
	}
	return out
}

func availClass(e schema.TenantAvailability) string {
	switch {
	case e.Desired == 0:
		return "cond-idle"
	case e.Ready >= e.Desired && e.APIReady:
		return "cond-good"
	case e.Ready > 0 && e.APIReady:
		return "cond-busy"
	}
	return "cond-bad"
}

func availTitle(e schema.TenantAvailability, from, to time.Time, sp span) string {
	api := "API does not answer"
	if e.APIReady {
		api = "API answers"
	}
	return fmt.Sprintf("%s–%s UTC: %d of %d machines ready, %s", sp.clock(from), sp.clock(to), e.Ready, e.Desired, api)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// gauges are the sparklines of a machine's samples: load, memory used
// (of its total), and etcd's DB size where any sample has one. A history
// reaching back past the full resolution's window has a Step of its
// downsampled samples while its latest come a minute apart: the lines
// take their spacing from the neighbouring samples, a minute at least.
func gauges(h schema.MachineHistory) []sparkline {
	gap := time.Minute
	load := sparkline{Name: "load", Step: gap, Format: func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }}
	mem := sparkline{Name: "memory", Step: gap, Format: func(v float64) string { return ibytes(v) }}
	db := sparkline{Name: "etcd DB size", Step: gap, Format: func(v float64) string { return ibytes(v) }}
	for _, s := range h.Samples {
		load.Points = append(load.Points, point{At: s.At, V: s.Load1})
		mem.Points = append(mem.Points, point{At: s.At, V: float64(s.MemoryUsedBytes)})
		mem.Top = max(mem.Top, float64(s.MemoryTotalBytes))
		if s.EtcdDBSizeBytes > 0 {
			db.Points = append(db.Points, point{At: s.At, V: float64(s.EtcdDBSizeBytes)})
		}
	}
	out := []sparkline{load, mem}
	if len(db.Points) > 0 {
		out = append(out, db)
	}
	return out
}

// ibytes prints a size in binary units, as the pages do elsewhere.
func ibytes(v float64) string { return humanize.IBytes(uint64(max(v, 0))) }
