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
	"took":       took,
	"join":       strings.Join,
	"path":       url.PathEscape,
	"short":      shortSHA,
	"commitName": schema.CommitName,
	"firstLine":  firstLine,
	"maxOne":     func(n int) int { return max(n, 1) },
	"phaseClass": phaseClass,
	"stageClass": stageClass,
	"condClass": func(s schema.ConditionStatus) string {
		switch s {
		case schema.ConditionTrue:
			return "true"
		case schema.ConditionFalse:
			return "false"
		}
		return "unknown"
	},
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

// phaseClass is the CSS class of a commit, tenant result or tenant phase.
func phaseClass(v any) string {
	p := strings.ToLower(fmt.Sprint(v))
	switch p {
	case "succeeded", "active":
		return "phase-ok"
	case "failed", "partiallyfailed", "invalid":
		return "phase-failed"
	case "planning", "applying", "validating", "pending", "forming", "shrinking":
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
