package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// Output formats of get.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
	outName  = "name"
)

func checkOutput(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown output format %q: use %s", format, strings.Join(allowed, ", "))}
}

// newTabWriter aligns columns as kubectl does.
func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 10, 4, 3, ' ', 0)
}

// printTable writes rows under headers, aligned.
func printTable(w io.Writer, headers []string, rows [][]string, noHeaders bool) error {
	tw := newTabWriter(w)
	if !noHeaders {
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// tableRows makes the rows of items.
func tableRows(rt *resourceType, items []json.RawMessage, wide bool, now time.Time) ([][]string, error) {
	rows := make([][]string, 0, len(items))
	for _, raw := range items {
		r, err := rt.row(raw, wide, now)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", rt.singular(), err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// printJSON writes raw JSON indented by two spaces.
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("the server sent JSON that does not parse: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printYAML writes raw JSON as YAML, keys sorted.
func printYAML(w io.Writer, raw []byte) error {
	b, err := yaml.JSONToYAML(raw)
	if err != nil {
		return fmt.Errorf("the server sent JSON that does not parse: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// printObjects writes objects of one type in format: a table, a list
// {"items":[…],"total":N} for json and yaml (the object itself when single
// is set), or kind/NAME lines.
func printObjects(w io.Writer, rt *resourceType, items []json.RawMessage, format string, single, noHeaders bool, now time.Time) error {
	switch format {
	case outJSON, outYAML:
		var doc []byte
		if single && len(items) == 1 {
			doc = items[0]
		} else {
			b, err := json.Marshal(api.NewList(items))
			if err != nil {
				return err
			}
			doc = b
		}
		if format == outJSON {
			return printJSON(w, doc)
		}
		return printYAML(w, doc)
	case outName:
		for _, raw := range items {
			if _, err := fmt.Fprintln(w, rt.displayName(raw)); err != nil {
				return err
			}
		}
		return nil
	}
	wide := format == outWide
	rows, err := tableRows(rt, items, wide, now)
	if err != nil {
		return err
	}
	return printTable(w, rt.columns(wide), rows, noHeaders)
}

// rowWriter writes table rows one at a time, as a watch delivers them,
// padding each cell to the widths the first rows set.
type rowWriter struct {
	w      io.Writer
	widths []int
}

// setWidths takes the widths of headers and rows as the minimum widths.
func (rw *rowWriter) setWidths(rows ...[]string) {
	for _, r := range rows {
		for i, c := range r {
			if i >= len(rw.widths) {
				rw.widths = append(rw.widths, 0)
			}
			rw.widths[i] = max(rw.widths[i], len([]rune(c)))
		}
	}
}

func (rw *rowWriter) write(row []string) error {
	var b strings.Builder
	for i, c := range row {
		b.WriteString(c)
		if i == len(row)-1 {
			break
		}
		// As newTabWriter: at least 10 columns, 3 of them padding.
		width := 0
		if i < len(rw.widths) {
			width = rw.widths[i]
		}
		pad := max(10, width+3) - len([]rune(c))
		b.WriteString(strings.Repeat(" ", max(pad, 1)))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(rw.w, b.String())
	return err
}
