package tofu

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/rezuscloud/rezuscloud/schema"
)

// What tofu says, read: this file owns the parsing of tofu's output, so
// that a change of its wording has one place to go. Its parts:
//
//   - the human output of plan and apply: the resources a plan changes and
//     its summary line (planLine), the questions tofu waits on (asked),
//     and its errors (oneLine, errorLines, LockHeld);
//   - the JSON lines of `tofu plan -json`: planned changes, the change
//     summary and drift (planJSON);
//   - the JSON of a plan file as `tofu show -json` prints it (summarize,
//     DriftOf).
//
// Nothing here runs tofu or reads a file: callers hand it what tofu
// printed.

// planLineRE matches the summary line of tofu's human plan output, with the
// import and forget counts tofu adds when it has them.
var planLineRE = regexp.MustCompile(`^Plan: (?:\d+ to import, )?(\d+) to add, (\d+) to change, (\d+) to destroy(?:, \d+ to forget)?\.$`)

// planResourceRE matches the comment line above each resource of tofu's
// human plan output that says what becomes of the resource: created,
// updated in place, destroyed, or replaced (destroyed and created again).
// A deposed object's line names it after the address.
var planResourceRE = regexp.MustCompile(`^\s*# (.+?)(?: \(deposed object \S+\))? (will be created|will be updated in-place|will be destroyed|must be replaced|will be replaced|is tainted, so it must be replaced)(?:[, ].*)?$`)

// planActions are the actions of planResourceRE's phrases.
var planActions = map[string][]string{
	"will be created":          {"create"},
	"will be updated in-place": {"update"},
	"will be destroyed":        {"delete"},
}

// planLine watches tofu's output for the plan's summary line, and for the
// resources the plan changes.
type planLine struct {
	mu      sync.Mutex
	partial []byte
	sum     schema.PlanSummary
	found   bool
	changes []PlannedChange
}

var _ io.Writer = (*planLine)(nil)

func (p *planLine) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(p.partial)+len(b) <= 256 {
				p.partial = append(p.partial, b...)
			} else {
				p.partial = p.partial[:0]
			}
			break
		}
		line := b[:i]
		if len(p.partial) > 0 {
			line = append(p.partial, line...)
			p.partial = p.partial[:0]
		}
		line = bytes.TrimRight(line, "\r")
		if m := planLineRE.FindSubmatch(line); m != nil {
			p.sum.Add, _ = strconv.Atoi(string(m[1]))
			p.sum.Change, _ = strconv.Atoi(string(m[2]))
			p.sum.Destroy, _ = strconv.Atoi(string(m[3]))
			p.found = true
		} else if m := planResourceRE.FindSubmatch(line); m != nil {
			acts, ok := planActions[string(m[2])]
			if !ok {
				acts = []string{"delete", "create"}
			}
			p.changes = append(p.changes, PlannedChange{Address: string(m[1]), Actions: acts})
		}
		b = b[i+1:]
	}
	return n, nil
}

// goneResources returns the resources the plan destroys or replaces.
func (p *planLine) goneResources() []PlannedChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PlannedChange
	for _, c := range p.changes {
		if slices.Contains(c.Actions, "delete") {
			out = append(out, c)
		}
	}
	return out
}

// planned returns every resource the plan changes.
func (p *planLine) planned() []PlannedChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.changes)
}

// summary returns the last summary line seen.
func (p *planLine) summary() (schema.PlanSummary, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sum, p.found
}

// planJSON reads the JSON lines of `tofu plan -json`: each planned
// change, the change summary, and whether a resource drifted.
type planJSON struct {
	buf     []byte
	sum     schema.PlanSummary
	changes []PlannedChange
	drifted bool
}

var _ io.Writer = (*planJSON)(nil)

func (p *planJSON) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		p.line(p.buf[:i])
		p.buf = p.buf[i+1:]
	}
}

func (p *planJSON) line(l []byte) {
	var msg struct {
		Type   string `json:"type"`
		Change struct {
			Resource struct {
				Addr string `json:"addr"`
			} `json:"resource"`
			Action string `json:"action"`
		} `json:"change"`
		Changes struct {
			Add, Change, Remove int
		} `json:"changes"`
	}
	if json.Unmarshal(l, &msg) != nil {
		return
	}
	switch msg.Type {
	case "planned_change":
		var acts []string
		switch msg.Change.Action {
		case "replace":
			acts = []string{"delete", "create"}
		case "noop", "read":
			return
		default:
			acts = []string{msg.Change.Action}
		}
		p.changes = append(p.changes, PlannedChange{Address: msg.Change.Resource.Addr, Actions: acts})
	case "change_summary":
		p.sum = schema.PlanSummary{Add: msg.Changes.Add, Change: msg.Changes.Change, Destroy: msg.Changes.Remove}
	case "resource_drift":
		p.drifted = true
	}
}

// flush reads a last line that has no newline.
func (p *planJSON) flush() {
	if len(p.buf) > 0 {
		p.line(p.buf)
		p.buf = nil
	}
}

// result returns the plan's summary and the resources it changes.
func (p *planJSON) result() (schema.PlanSummary, []PlannedChange) {
	p.flush()
	return p.sum, p.changes
}

// drift reports whether a resource drifted.
func (p *planJSON) drift() bool {
	p.flush()
	return p.drifted
}

// summarize counts the changes of a plan file's plan, and lists them.
func summarize(plan *tfjson.Plan) (schema.PlanSummary, []PlannedChange) {
	var sum schema.PlanSummary
	var changes []PlannedChange
	for _, rc := range plan.ResourceChanges {
		if rc.Change == nil {
			continue
		}
		a := rc.Change.Actions
		var acts []string
		switch {
		case a.Replace():
			sum.Add++
			sum.Destroy++
			acts = []string{"delete", "create"}
		case a.Create():
			sum.Add++
			acts = []string{"create"}
		case a.Update():
			sum.Change++
			acts = []string{"update"}
		case a.Delete():
			sum.Destroy++
			acts = []string{"delete"}
		default:
			continue
		}
		changes = append(changes, PlannedChange{Address: rc.Address, Actions: acts})
	}
	return sum, changes
}

// DriftOf lists the resource_drift of a refresh-only plan: each resource's
// address, action and the names of its attributes that changed.
func DriftOf(plan *tfjson.Plan) []DriftedResource {
	var out []DriftedResource
	for _, rc := range plan.ResourceDrift {
		if rc.Change == nil {
			continue
		}
		d := DriftedResource{Address: rc.Address, Action: "update"}
		if rc.Change.Actions.Delete() {
			d.Action = "delete"
		} else {
			d.Attributes = changedAttributes(rc.Change.Before, rc.Change.After)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

// changedAttributes names the top-level attributes whose values differ
// between before and after.
func changedAttributes(before, after any) []string {
	b, _ := before.(map[string]any)
	a, _ := after.(map[string]any)
	var names []string
	for k, v := range b {
		if w, ok := a[k]; !ok || !reflect.DeepEqual(v, w) {
			names = append(names, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// approvalRE matches the end of tofu's output while it waits for the
// approval of its plan: the question starts a line of its own, which no
// value in a plan's output does (values are indented).
var approvalRE = regexp.MustCompile(`\n(Do you want to perform these actions\?|Do you really want to destroy all resources\?)\n(  [^\n]*\n)+\n  Enter a value: $`)

// otherQuestionRE matches the end of tofu's output while it asks for
// something else, such as a variable without a value: a line of its own
// (var.NAME), its description indented, then the prompt.
var otherQuestionRE = regexp.MustCompile(`(^|\n)[^ \n][^\n]*\n(  [^\n]*\n)*  Enter a value: $`)

// askedFor is what tofu waits for at the end of its output so far.
type askedFor int

const (
	askedNothing askedFor = iota
	askedApproval
	askedOther // a question the server has no answer to
)

// asked says what tofu waits for when its output ends with tail.
func asked(tail []byte) askedFor {
	switch {
	case approvalRE.Match(tail):
		return askedApproval
	case otherQuestionRE.Match(tail):
		return askedOther
	}
	return askedNothing
}

// question returns the last two lines of tail, where tofu asked a
// question that the server has no answer to, as one line.
func question(tail []byte) string {
	lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
	return strings.TrimSpace(strings.Join(lines[max(0, len(lines)-2):], " "))
}

// oneLine condenses tofu's error text to one line: its first line, then
// each diagnostic ("Error: summary") with the resource it is about and its
// detail, without the source snippet. Text without diagnostics has its
// lines joined.
func oneLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	head := strings.TrimSpace(lines[0])
	type diag struct{ summary, with, detail string }
	var diags []*diag
	var loose []string
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		var d *diag
		if len(diags) > 0 {
			d = diags[len(diags)-1]
		}
		switch {
		case l == "" || snippetRE.MatchString(l):
		case strings.HasPrefix(l, "Error: "):
			diags = append(diags, &diag{summary: strings.TrimPrefix(l, "Error: ")})
		case d == nil:
			loose = append(loose, l)
		case strings.HasPrefix(l, "with ") && d.with == "":
			d.with = strings.TrimSuffix(l, ",")
		case strings.HasPrefix(l, "on ") && strings.Contains(l, " line "):
		default:
			d.detail = strings.TrimSpace(d.detail + " " + l)
		}
	}
	parts := loose
	for _, d := range diags {
		p := d.summary
		if d.with != "" {
			p += " (" + d.with + ")"
		}
		if d.detail != "" {
			p += ": " + d.detail
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return head
	}
	return head + ": " + strings.Join(parts, "; ")
}

// snippetRE matches the lines of a diagnostic's source snippet.
var snippetRE = regexp.MustCompile(`^(\d+:|[├│╵╷])`)

// errorLines returns the part of tofu's output from its first error on,
// which is what its error diagnostics say; the last lines when there is
// none.
func errorLines(out []byte) []byte {
	if i := bytes.Index(out, []byte("Error: ")); i >= 0 {
		if j := bytes.LastIndexByte(out[:i], '\n'); j >= 0 {
			i = j + 1
		}
		return out[i:]
	}
	const keep = 2 << 10
	if len(out) > keep {
		out = out[len(out)-keep:]
	}
	return out
}

// LockHeld reports whether err, of a tofu command, says that someone else
// holds the state lock: tofu says so only in the text of its error.
func LockHeld(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error acquiring the state lock")
}
