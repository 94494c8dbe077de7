package history

import (
	"fmt"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// window is a query's bounds; a zero Until has no end.
type window struct{ since, until time.Time }

func (w window) has(t time.Time) bool {
	return !t.Before(w.since) && (w.until.IsZero() || !t.After(w.until))
}

// overlaps says whether the chunk from start for span overlaps w.
func (w window) overlaps(start time.Time, span time.Duration) bool {
	return start.Add(span).After(w.since) && (w.until.IsZero() || !start.After(w.until))
}

// Machine returns machine's history of tenant within q: its transitions
// (the first, when one is known from before q.Since, is the state it was
// in at q.Since, with the time it entered it) and its samples, resampled
// to q.Step when set: the first step may start before q.Since and holds
// only the samples within it. It returns an error wrapping store.ErrNotFound when
// the machine has no history at all.
func Machine(tx store.Tx, tenant, machine string, q Query) (schema.MachineHistory, error) {
	h := schema.MachineHistory{Tenant: tenant, Machine: machine, Since: q.Since.UTC(), Until: q.Until.UTC(),
		Transitions: []schema.MachineTransition{}, Samples: []schema.MachineSample{}}
	if err := checkNames(tenant, machine); err != nil {
		return h, err
	}
	w := window{since: q.Since, until: q.Until}
	found := false
	var samples []agg
	step := time.Minute
	err := scanMachine(tx, tenant, machine, func(p parsedKey, key string, data []byte) error {
		found = true
		switch p.kind {
		case kindSamples, kindMachineSamples:
			if !w.overlaps(p.start, time.Hour) {
				return nil
			}
			ss, err := decode(key, data, func(r *reader) schema.MachineSample { return getTimedSample(r, p.start) })
			for _, s := range ss {
				samples = append(samples, agg{s: s, n: 1})
			}
			return err
		case kindDownsampled:
			if !w.overlaps(p.start, day) {
				return nil
			}
			as, st, err := loadDownsampled(data, key, p.start)
			samples, step = append(samples, as...), max(step, st)
			return err
		}
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("history of %s/%s: %w", tenant, machine, err)
	}
	ts, known, err := transitions(tx, tenant, machine, w)
	if err != nil {
		return h, fmt.Errorf("history of %s/%s: %w", tenant, machine, err)
	}
	if !found && !known {
		return h, fmt.Errorf("history of %s/%s: %w", tenant, machine, store.ErrNotFound)
	}
	h.Transitions = append(h.Transitions, ts...)
	var in []agg
	for _, a := range sortedAggs(samples) {
		if w.has(a.s.At) {
			in = append(in, a)
		}
	}
	if q.Step > 0 {
		step = max(q.Step.Truncate(time.Minute), time.Minute)
		in = bucketed(in, step)
	}
	for _, a := range in {
		h.Samples = append(h.Samples, a.s)
	}
	h.Step = int64(step / time.Second)
	return h, nil
}

// scanMachine calls fn with each sample chunk of machine (full and
// downsampled), kind by kind in key order. The full-resolution chunks
// keyed by hour first are those of every machine of the tenant, and fn
// is called with machine's alone.
func scanMachine(tx store.Tx, tenant, machine string, fn func(p parsedKey, key string, data []byte) error) error {
	prefixes := []string{kindDownsampled + "/" + machine + "/", kindMachineSamples + "/" + machine + "/", kindSamples + "/"}
	for _, prefix := range prefixes {
		err := tx.ScanSeries(tenantPrefix(tenant)+prefix, func(key string, data []byte) error {
			p, err := parseKey(tenant, key)
			switch {
			case err != nil:
				return err
			case p.machine != machine:
				return nil // an hour's chunk of another machine
			}
			return fn(p, key, data)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// sortedAggs returns as in time order (full and downsampled chunks come
// in separately).
func sortedAggs(as []agg) []agg {
	var out []agg
	for _, a := range as {
		out = insert(out, a, func(a agg) time.Time { return a.s.At })
	}
	return out
}

// Tenant returns tenant's history within q: its availability, the
// transitions of each of its machines (each led by the state it was in at
// q.Since, when known) and its marks. q.Step does not apply.
func Tenant(tx store.Tx, tenant string, q Query) (schema.TenantHistory, error) {
	h := schema.TenantHistory{Tenant: tenant, Since: q.Since.UTC(), Until: q.Until.UTC(),
		Availability: []schema.TenantAvailability{}, Machines: []schema.MachineTimeline{}, Marks: []schema.HistoryMark{}}
	if err := checkName("tenant", tenant); err != nil {
		return h, err
	}
	w := window{since: q.Since, until: q.Until}
	machines, err := machinesWithTransitions(tx, tenant)
	if err != nil {
		return h, fmt.Errorf("history of %s: %w", tenant, err)
	}
	for _, m := range machines {
		ts, _, err := transitions(tx, tenant, m, w)
		if err != nil {
			return h, fmt.Errorf("history of %s/%s: %w", tenant, m, err)
		}
		h.Machines = append(h.Machines, schema.MachineTimeline{Machine: m, Transitions: ts})
	}
	if h.Availability, err = availability(tx, tenant, w); err != nil {
		return h, fmt.Errorf("history of %s: %w", tenant, err)
	}
	if h.Marks, err = marks(tx, tenant, w); err != nil {
		return h, fmt.Errorf("history of %s: %w", tenant, err)
	}
	return h, nil
}

// machinesWithTransitions lists the machines with transitions, in name
// order.
func machinesWithTransitions(tx store.Tx, tenant string) ([]string, error) {
	var out []string
	prefix := tenantPrefix(tenant) + kindTransitions + "/"
	err := tx.ScanSeries(prefix, func(key string, _ []byte) error {
		m, _, _ := strings.Cut(strings.TrimPrefix(key, prefix), "/")
		if len(out) == 0 || out[len(out)-1] != m {
			out = append(out, m)
		}
		return nil
	})
	return out, err
}

// transitions returns machine's transitions within w, led by the last one
// before w, and whether it has any chunk of transitions at all.
func transitions(tx store.Tx, tenant, machine string, w window) ([]schema.MachineTransition, bool, error) {
	return windowed(tx, tenant, tenantPrefix(tenant)+kindTransitions+"/"+machine+"/", w, true, getTransition,
		func(t schema.MachineTransition) time.Time { return t.At })
}

// availability returns tenant's availability within w, led by the last
// one before w.
func availability(tx store.Tx, tenant string, w window) ([]schema.TenantAvailability, error) {
	as, _, err := windowed(tx, tenant, tenantPrefix(tenant)+kindAvailability+"/", w, true, getAvailability,
		func(a schema.TenantAvailability) time.Time { return a.At })
	return as, err
}

// marks returns tenant's marks within w.
func marks(tx store.Tx, tenant string, w window) ([]schema.HistoryMark, error) {
	ms, _, err := windowed(tx, tenant, tenantPrefix(tenant)+kindMarks+"/", w, false, getMark,
		func(m schema.HistoryMark) time.Time { return m.At })
	return ms, err
}

// windowed returns the entries within w of the day chunks under prefix,
// led, when lead is set, by the last entry before w; and whether there is
// any chunk under prefix. It decodes only the chunks that overlap w and,
// for the lead, the last one before them.
func windowed[T any](tx store.Tx, tenant, prefix string, w window, lead bool,
	get func(*reader, time.Time) T, at func(T) time.Time) ([]T, bool, error) {
	out := []T{}
	var before []T
	var lastBefore string
	known := false
	err := tx.ScanSeries(prefix, func(key string, data []byte) error {
		known = true
		p, err := parseKey(tenant, key)
		switch {
		case err != nil:
			return err
		case !p.start.Add(day).After(w.since):
			lastBefore = key
			return nil
		case !w.overlaps(p.start, day):
			return nil
		}
		items, err := decode(key, data, func(r *reader) T { return get(r, p.start) })
		for _, it := range items {
			switch {
			case at(it).Before(w.since):
				before = []T{it}
			case w.has(at(it)):
				out = append(out, it)
			}
		}
		return err
	})
	if err != nil || !lead {
		return out, known, err
	}
	if before == nil && lastBefore != "" {
		p, err := parseKey(tenant, lastBefore)
		if err != nil {
			return nil, known, err
		}
		items, err := load(tx, lastBefore, func(r *reader) T { return get(r, p.start) })
		if err != nil {
			return nil, known, err
		}
		before = items[max(len(items)-1, 0):]
	}
	if len(before) == 0 {
		return out, known, nil
	}
	return append(before, out...), known, nil
}
