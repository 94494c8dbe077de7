package ui

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/dustin/go-humanize"

	"github.com/rezuscloud/rezuscloud/schema"
)

//go:embed templates
var templateFiles embed.FS

// pageSet holds one template per page, each parsed with the layout.
type pageSet map[string]*template.Template

// pages are the dashboard's pages by name: a page NAME is
// templates/NAME.html with the layout. A page's regions that the live
// script refreshes are its templates "part:REGION".
var pages = parsePages("overview", "tenant", "machine", "commits", "commit", "login", "error", "bounce")

func parsePages(names ...string) pageSet {
	set := pageSet{}
	for _, name := range names {
		t := template.Must(template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html"))
		set[name] = t
	}
	return set
}

// execute renders page name with v: the whole page, or with parts only
// the regions of those names, one after the other.
func (ps pageSet) execute(w io.Writer, name string, v *view, parts []string) error {
	t := ps[name]
	if t == nil {
		return fmt.Errorf("no page %q", name)
	}
	if name == "bounce" {
		return t.ExecuteTemplate(w, "bounce", v)
	}
	if len(parts) == 0 {
		return t.ExecuteTemplate(w, "layout", v)
	}
	for _, p := range parts {
		part := t.Lookup("part:" + p)
		if part == nil {
			continue
		}
		if err := part.Execute(w, v); err != nil {
			return err
		}
	}
	return nil
}

// timeAt is a time and the time it is shown at, for the "time" template.
type timeAt struct {
	T, Now time.Time
}

type condsAt struct {
	List schema.Conditions
	Now  time.Time
}

var funcs = template.FuncMap{
	"at":    func(now, t time.Time) timeAt { return timeAt{T: t, Now: now} },
	"conds": func(cs schema.Conditions, now time.Time) condsAt { return condsAt{List: cs, Now: now} },
	"age":   age,
	"rfc3339": func(t time.Time) string {
		return t.UTC().Format(time.RFC3339)
	},
	"exact": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
	"took":         took,
	"join":         strings.Join,
	"path":         url.PathEscape,
	"short":        shortSHA,
	"commitName":   schema.CommitName,
	"firstLine":    firstLine,
	"maxOne":       func(n int) int { return max(n, 1) },
	"phaseClass":   phaseClass,
	"stageClass":   stageClass,
	"condClass":    func(c schema.Condition) string { return "cond-" + condMeaning(c) },
	"health":       health,
	"serviceClass": serviceClass,
	"ref":          refBreaks,
	"bytes":        func(n int64) string { return humanize.IBytes(uint64(max(n, 0))) },
	"ubytes":       humanize.IBytes,
	"pct":          func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " %" },
	"mib":          func(n int) string { return humanize.IBytes(uint64(max(n, 0)) << 20) },
	"condWord":     condWord,
	"noBackup":     noBackup,
}

// age says how long ago t was, as kubectl does: 45s, 12m, 5h, 3d, 2y;
// a time ahead (a retry to come) reads "in 45s".
func age(t, now time.Time) string {
	d := now.Sub(t)
	prefix, suffix := "", " ago"
	if d < 0 {
		d, prefix, suffix = -d, "in ", ""
	}
	var s string
	switch {
	case d < 2*time.Minute:
		s = strconv.Itoa(int(d/time.Second)) + "s"
	case d < 2*time.Hour:
		s = strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		s = strconv.Itoa(int(d/time.Hour)) + "h"
	case d < 2*365*24*time.Hour:
		s = strconv.Itoa(int(d/(24*time.Hour))) + "d"
	default:
		s = strconv.Itoa(int(d/(365*24*time.Hour))) + "y"
	}
	return prefix + s + suffix
}

// took is how long from start to end, rounded; "" when either is unknown.
func took(start, end time.Time) string {
	if start.IsZero() || end.IsZero() || end.Before(start) {
		return ""
	}
	d := end.Sub(start)
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// phaseClass is the CSS class of a commit, tenant result or tenant phase,
// or of a restore's phase.
func phaseClass(v any) string {
	p := strings.ToLower(fmt.Sprint(v))
	switch p {
	case "succeeded", "active", "done":
		return "phase-ok"
	case "failed", "partiallyfailed", "invalid":
		return "phase-failed"
	case "planning", "applying", "validating", "pending", "forming", "shrinking",
		"wiping", "recovering", "bootstrapping", "joining", "kubelets": // the last five: a restore's
		return "phase-busy"
	case "removing":
		return "phase-removing"
	case "superseded":
		return "phase-superseded"
	}
	return "phase-unknown"
}

// stageClass is the CSS class of a machine stage.
func stageClass(s schema.MachineStage) string {
	switch s {
	case schema.StageReady:
		return "stage-ready"
	case schema.StageInitializing, schema.StageInstalling, schema.StageConfiguring, schema.StageUpdating, schema.StageRestarting:
		return "stage-busy"
	case schema.StageStopping, schema.StageOff, schema.StageRemoving:
		return "stage-off"
	}
	return "stage-unknown"
}

// What a condition, or a service, means for the object it is of; the CSS
// class cond-MEANING colours its badge.
const (
	meaningGood    = "good"    // as a healthy object is: green
	meaningIdle    = "idle"    // nothing under way, nothing wrong: grey
	meaningBusy    = "busy"    // work under way: amber
	meaningHeld    = "held"    // held back on purpose: blue
	meaningBad     = "bad"     // needs someone: red
	meaningUnknown = "unknown" // not known yet: light grey
)

// condMeaning is what a condition says of its object, by its type: Ready
// True, and Stalled, Drifted and BackupFailed False, are good; Reconciling, Upgrading
// and Suspended False are idle; Reconciling or Upgrading True, and Ready
// Unknown while work progresses or False while machines come up, are
// busy; Suspended True is held; Ready False for any other reason (but for
// a commit that newer ones superseded), Stalled, Drifted or BackupFailed
// True, and a rollout that failed are bad. It is the one place that
// decides how a condition is coloured.
func condMeaning(c schema.Condition) string {
	if c.Reason == schema.ReasonRolloutFailed {
		return meaningBad
	}
	if c.Status != schema.ConditionTrue && c.Status != schema.ConditionFalse {
		if c.Type == schema.ConditionReady && c.Reason == schema.ReasonProgressing {
			return meaningBusy
		}
		return meaningUnknown
	}
	isTrue := c.Status == schema.ConditionTrue
	switch c.Type {
	case schema.ConditionReady:
		switch {
		case isTrue:
			return meaningGood
		case c.Reason == schema.ReasonSuperseded:
			return meaningIdle
		case c.Reason == schema.ReasonMachinesNotReady:
			return meaningBusy
		}
		return meaningBad
	case schema.ConditionStalled, schema.ConditionDrifted, schema.ConditionBackupFailed:
		if isTrue {
			return meaningBad
		}
		return meaningGood
	case schema.ConditionSuspended:
		if isTrue {
			return meaningHeld
		}
		return meaningIdle
	case schema.ConditionReconciling, schema.ConditionUpgrading:
		if isTrue {
			return meaningBusy
		}
		return meaningIdle
	}
	return meaningIdle
}

// badge is one coloured word about an object, with its details on hover.
type badge struct {
	Text, Class, Title string
}

// health is a tenant's health, from its status, in a few badges: its readiness, then each
// condition that is neither good nor idle (stalled, drifted, suspended,
// upgrading, reconciling), coloured by condMeaning.
func health(st schema.TenantStatus) []badge {
	cs := st.Conditions
	ready := cs.Get(schema.ConditionReady)
	if ready == nil { // a status from before conditions: its ready flag
		c := schema.Condition{Type: schema.ConditionReady, Status: schema.ConditionFalse}
		if st.Ready {
			c.Status = schema.ConditionTrue
		}
		ready = &c
	}
	b := []badge{conditionBadge(*ready)}
	switch {
	case ready.Status == schema.ConditionTrue:
		b[0].Text = "ready"
	case ready.Status == schema.ConditionFalse:
		b[0].Text = "not ready"
	case ready.Reason == schema.ReasonProgressing:
		b[0].Text = "progressing"
	default:
		b[0].Text = "readiness unknown"
	}
	for _, c := range cs {
		if c.Type == schema.ConditionReady {
			continue
		}
		if m := condMeaning(c); m != meaningGood && m != meaningIdle {
			cb := conditionBadge(c)
			cb.Text = condWord(c.Type)
			b = append(b, cb)
		}
	}
	return b
}

// condWord is a condition type in lower-case words, as a badge says it:
// "stalled", "backup failed".
func condWord(typ string) string {
	var b strings.Builder
	for i, r := range typ {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// noBackupBadge is the badge of a tenant that declares no spec.backup, so
// that the default of no backups is seen.
var noBackupBadge = badge{Text: "no etcd backup", Class: "cond-" + meaningIdle,
	Title: "spec.backup is not declared: nothing keeps a copy of this cluster's etcd"}

// noBackup is the "no etcd backup" badge of a tenant (a schema.Tenant or
// a pointer to one) that declares no backups, else nothing.
func noBackup(t any) []badge {
	var tn *schema.Tenant
	switch t := t.(type) {
	case *schema.Tenant:
		tn = t
	case schema.Tenant:
		tn = &t
	}
	if tn == nil || tn.BackupDeclared() {
		return nil
	}
	return []badge{noBackupBadge}
}

// conditionBadge is a condition's badge: its colour, and its reason and
// message on hover.
func conditionBadge(c schema.Condition) badge {
	title := c.Reason
	if c.Message != "" {
		title = strings.TrimPrefix(title+": "+c.Message, ": ")
	}
	return badge{Text: string(c.Status), Class: "cond-" + condMeaning(c), Title: title}
}

// serviceClass is the CSS class of a machine's Talos service: a running
// service is good unless its health check fails, one that failed is bad,
// one on its way up busy, one that finished idle.
func serviceClass(s schema.MachineService) string {
	switch {
	case s.Health == schema.ServiceUnhealthy || s.State == "Failed":
		return "cond-" + meaningBad
	case s.State == "Running":
		return "cond-" + meaningGood
	case s.State == "Finished" || s.State == "Skipped":
		return "cond-" + meaningIdle
	case s.State == "":
		return "cond-" + meaningUnknown
	}
	return "cond-" + meaningBusy
}

// refBreaks is a git ref that a narrow cell breaks only after its
// slashes (refs/heads/main), never inside a word.
func refBreaks(ref string) template.HTML {
	parts := strings.Split(ref, "/")
	for i, p := range parts {
		parts[i] = template.HTMLEscapeString(p)
	}
	return template.HTML(strings.Join(parts, "/<wbr>"))
}
