package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/rezuscloud/rezuscloud/internal/client"
	"github.com/rezuscloud/rezuscloud/schema"
)

// historyWords are the words that make get print a history.
var historyWords = []string{"history"}

// historyOptions are get's flags for a history: the window and the
// samples' step.
type historyOptions struct {
	since, until string
	step         time.Duration
}

// window turns the flags into the client's options: --since and --until
// take an RFC 3339 time or a duration before now (24h).
func (h historyOptions) window(now time.Time) (client.HistoryOptions, error) {
	var o client.HistoryOptions
	var err error
	if o.Since, err = timeFlag("--since", h.since, now); err != nil {
		return o, err
	}
	if o.Until, err = timeFlag("--until", h.until, now); err != nil {
		return o, err
	}
	o.Step = h.step
	return o, nil
}

func timeFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, &exitError{code: exitUsage, msg: fmt.Sprintf("%s %q: want an RFC 3339 time or a duration before now, such as 24h", name, v)}
	}
	return t, nil
}

// runGetHistory prints a tenant's history, or one machine's: args are
// [TENANT] [MACHINE], the tenant also by --tenant.
func runGetHistory(ctx context.Context, c *client.Client, stdout io.Writer, args []string, o *getOptions, h historyOptions, now time.Time) error {
	tenant := o.tenant
	if tenant == "" && len(args) > 0 {
		tenant, args = args[0], args[1:]
	}
	if tenant == "" || len(args) > 1 {
		return &exitError{code: exitUsage, msg: "give a tenant and at most one machine: rezusctl get history TENANT [MACHINE]"}
	}
	if o.selector != "" || o.watch || o.watchOnly || o.output == outName {
		return &exitError{code: exitUsage, msg: "a history takes no --selector, no --watch and no -o name"}
	}
	win, err := h.window(now)
	if err != nil {
		return err
	}
	if len(args) == 1 {
		mh, err := c.MachineHistory(ctx, tenant, args[0], win)
		if err != nil {
			return apiError(err)
		}
		return printMachineHistory(stdout, mh, o)
	}
	if h.step > 0 {
		return &exitError{code: exitUsage, msg: "--step resamples a machine's samples: give a MACHINE"}
	}
	th, err := c.TenantHistory(ctx, tenant, win)
	if err != nil {
		return apiError(err)
	}
	return printTenantHistory(stdout, th, o)
}

// printObject prints v as JSON or YAML when o asks for one; done says it
// did.
func printObject(w io.Writer, v any, o *getOptions) (done bool, err error) {
	if o.output != outJSON && o.output != outYAML {
		return false, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return true, err
	}
	if o.output == outJSON {
		return true, printJSON(w, b)
	}
	return true, printYAML(w, b)
}

// printTenantHistory prints a tenant's history as events in time order,
// as kubectl prints events: TIME, MACHINE and what happened.
func printTenantHistory(w io.Writer, h *schema.TenantHistory, o *getOptions) error {
	if done, err := printObject(w, h, o); done {
		return err
	}
	type event struct {
		at            time.Time
		machine, what string
	}
	var events []event
	for _, a := range h.Availability {
		events = append(events, event{a.At, "", availabilityText(a)})
	}
	for _, m := range h.Machines {
		for _, t := range m.Transitions {
			events = append(events, event{t.At, m.Machine, t.Words()})
		}
	}
	for _, m := range h.Marks {
		what := schema.MarkWords(m.Kind)
		if m.Message != "" {
			what += ": " + m.Message
		}
		events = append(events, event{m.At, m.Machine, what})
	}
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	rows := make([][]string, 0, len(events))
	for _, e := range events {
		rows = append(rows, []string{e.at.UTC().Format(time.RFC3339), orNone(e.machine), e.what})
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "No history of tenant %s from %s to %s.\n", h.Tenant, h.Since.Format(time.RFC3339), h.Until.Format(time.RFC3339))
		return err
	}
	return printTable(w, []string{"TIME", "MACHINE", "EVENT"}, rows, o.noHeaders)
}

// availabilityText says a tenant's availability: "available 3/3, API
// answers".
func availabilityText(a schema.TenantAvailability) string {
	api := "API does not answer"
	if a.APIReady {
		api = "API answers"
	}
	return fmt.Sprintf("available %d/%d, %s", a.Ready, a.Desired, api)
}

// printMachineHistory prints a machine's transitions, then its samples:
// in a table with -o wide, else summed up in a line.
func printMachineHistory(w io.Writer, h *schema.MachineHistory, o *getOptions) error {
	if done, err := printObject(w, h, o); done {
		return err
	}
	rows := make([][]string, 0, len(h.Transitions))
	for _, t := range h.Transitions {
		rows = append(rows, []string{t.At.UTC().Format(time.RFC3339), orNone(string(t.Stage)), strconv.FormatBool(t.Ready),
			strconv.FormatBool(t.Connected), configWord(schema.MachineStatus{Connected: t.Connected, ConfigUpToDate: t.ConfigUpToDate})})
	}
	if len(rows) > 0 {
		if err := printTable(w, []string{"TIME", "STAGE", "READY", "CONNECTED", "CONFIG"}, rows, o.noHeaders); err != nil {
			return err
		}
	}
	if o.output == outWide && len(h.Samples) > 0 {
		if len(rows) > 0 {
			fmt.Fprintln(w)
		}
		return printTable(w, []string{"TIME", "LOAD1", "MEMORY", "ETCD DB", "LEADER"}, sampleRows(h.Samples), o.noHeaders)
	}
	_, err := fmt.Fprintln(w, samplesText(h))
	return err
}

func sampleRows(ss []schema.MachineSample) [][]string {
	rows := make([][]string, 0, len(ss))
	for _, s := range ss {
		db, leader := "<none>", "<none>"
		if s.EtcdDBSizeBytes > 0 {
			db, leader = bytesText(s.EtcdDBSizeBytes), strconv.FormatBool(s.EtcdLeader)
		}
		rows = append(rows, []string{s.At.UTC().Format(time.RFC3339), strconv.FormatFloat(s.Load1, 'f', 2, 64),
			humanize.IBytes(s.MemoryUsedBytes) + "/" + humanize.IBytes(s.MemoryTotalBytes), db, leader})
	}
	return rows
}

// samplesText sums a machine's samples up in a line: how many, their
// step, and the last and largest load, memory and etcd DB size.
func samplesText(h *schema.MachineHistory) string {
	if len(h.Samples) == 0 {
		return "No samples."
	}
	last := h.Samples[len(h.Samples)-1]
	var maxLoad float64
	var maxMem uint64
	var maxDB int64
	for _, s := range h.Samples {
		maxLoad, maxMem, maxDB = max(maxLoad, s.Load1), max(maxMem, s.MemoryUsedBytes), max(maxDB, s.EtcdDBSizeBytes)
	}
	text := fmt.Sprintf("%d samples every %s: load %.2f now, %.2f at most; memory %s of %s now, %s at most",
		len(h.Samples), time.Duration(h.Step)*time.Second, last.Load1, maxLoad,
		humanize.IBytes(last.MemoryUsedBytes), humanize.IBytes(last.MemoryTotalBytes), humanize.IBytes(maxMem))
	if maxDB > 0 {
		text += fmt.Sprintf("; etcd DB %s now, %s at most", bytesText(last.EtcdDBSizeBytes), bytesText(maxDB))
	}
	return text + " (-o wide lists them)."
}
