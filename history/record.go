package history

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Caps that bound a day's bytes: past them, a day's last entry is
// replaced by the newest, so that the day still ends in the latest state.
const (
	// MaxTransitionsPerDay is the most transitions kept of a machine a
	// day, and the most availability changes and marks of a tenant.
	MaxTransitionsPerDay = 1000
	// maxTransitionBytes and maxSampleBytes are the most bytes one entry
	// takes: its offset, strings at their caps, numbers at their widest.
	maxTransitionBytes = 4 + 1 + maxStage + 1
	maxSampleBytes     = 3 + 5 + 8 + 8 + 1 + 10
	// MaxMachineDayBytes bounds the bytes a machine's history takes a
	// day at full resolution: a sample a minute and MaxTransitionsPerDay
	// transitions, every entry at its widest. A typical day (a sample a
	// minute, a few transitions) takes about a sixth of it.
	MaxMachineDayBytes = 24*60*maxSampleBytes + MaxTransitionsPerDay*maxTransitionBytes
)

// RecordTransition records that machine of tenant entered the state t at
// t.At. A state the same as the one before it is not recorded again.
func RecordTransition(tx store.Tx, tenant, machine string, t schema.MachineTransition) error {
	if err := checkNames(tenant, machine); err != nil {
		return err
	}
	t.At = t.At.UTC()
	start := dayOf(t.At)
	key := chunkKey(tenant, kindTransitions, machine, start)
	get := func(r *reader) schema.MachineTransition { return getTransition(r, start) }
	ts, err := load(tx, key, get)
	if err != nil {
		return err
	}
	if n := len(ts); n > 0 && ts[n-1].Same(t) && !ts[n-1].At.After(t.At) {
		return nil
	}
	ts = capped(ts, t, func(t schema.MachineTransition) time.Time { return t.At })
	if err := markTenant(tx, tenant); err != nil {
		return err
	}
	return save(tx, key, nil, ts, func(w *writer, t schema.MachineTransition) { putTransition(w, start, t) })
}

// RecordAvailability records tenant's availability a from a.At on, unless
// it is the same as the one before it.
func RecordAvailability(tx store.Tx, tenant string, a schema.TenantAvailability) error {
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	a.At = a.At.UTC()
	start := dayOf(a.At)
	key := chunkKey(tenant, kindAvailability, "", start)
	as, err := load(tx, key, func(r *reader) schema.TenantAvailability { return getAvailability(r, start) })
	if err != nil {
		return err
	}
	if n := len(as); n > 0 && sameAvailability(as[n-1], a) && !as[n-1].At.After(a.At) {
		return nil
	}
	as = capped(as, a, func(a schema.TenantAvailability) time.Time { return a.At })
	if err := markTenant(tx, tenant); err != nil {
		return err
	}
	return save(tx, key, nil, as, func(w *writer, a schema.TenantAvailability) { putAvailability(w, start, a) })
}

func sameAvailability(a, b schema.TenantAvailability) bool {
	a.At, b.At = time.Time{}, time.Time{}
	return a == b
}

// RecordMark records the mark m of tenant at m.At. Its kind and machine
// are kept to 63 bytes, its message to 200.
func RecordMark(tx store.Tx, tenant string, m schema.HistoryMark) error {
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	m.At = m.At.UTC()
	start := dayOf(m.At)
	key := chunkKey(tenant, kindMarks, "", start)
	ms, err := load(tx, key, func(r *reader) schema.HistoryMark { return getMark(r, start) })
	if err != nil {
		return err
	}
	ms = capped(ms, m, func(m schema.HistoryMark) time.Time { return m.At })
	if err := markTenant(tx, tenant); err != nil {
		return err
	}
	return save(tx, key, nil, ms, func(w *writer, m schema.HistoryMark) { putMark(w, start, m) })
}

// RecordSamples records the gauges of tenant's machines (by machine name)
// taken at at, to the second. A machine keeps one sample a minute: a
// second one in the same minute replaces the first.
func RecordSamples(tx store.Tx, tenant string, at time.Time, s map[string]schema.MachineSample) error {
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	at = at.UTC().Truncate(time.Second)
	start := hourOf(at)
	for _, machine := range slices.Sorted(maps.Keys(s)) {
		if err := checkName("machine", machine); err != nil {
			return err
		}
		sample := s[machine]
		sample.At = at
		if err := recordSample(tx, chunkKey(tenant, kindSamples, machine, start), start, sample); err != nil {
			return err
		}
	}
	if len(s) == 0 {
		return nil
	}
	return markTenant(tx, tenant)
}

// recordSample puts sample into the chunk under key, which starts at
// start. A sample of a minute after the chunk's last, as every minute's
// is, is appended to the chunk's bytes, from the state of its last entry:
// the same bytes as the chunk written anew, without decoding its samples
// into memory first, which at a fleet's minute was most of what storing
// it allocated. Any other sample (a minute already there, or an earlier
// one) rewrites the chunk in time order.
func recordSample(tx store.Tx, key string, start time.Time, sample schema.MachineSample) error {
	data, err := tx.Series(key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	r := &reader{b: data}
	var last time.Time
	for r.more() {
		last = getTimedSample(r, start).At
	}
	if r.err != nil {
		return fmt.Errorf("history %s: %w", key, r.err)
	}
	if len(data) == 0 || last.Truncate(minute).Before(sample.At.Truncate(minute)) {
		w := &writer{b: append(make([]byte, 0, len(data)+maxSampleBytes), data...), total: r.total, db: r.db}
		putTimedSample(w, start, sample)
		return tx.PutSeries(key, w.b)
	}
	ss, err := decode(key, data, func(r *reader) schema.MachineSample { return getTimedSample(r, start) })
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ss, func(x schema.MachineSample) bool { return x.At.Truncate(minute).Equal(sample.At.Truncate(minute)) })
	if i >= 0 {
		ss[i] = sample
	} else {
		ss = insert(ss, sample, func(s schema.MachineSample) time.Time { return s.At })
	}
	return save(tx, key, nil, ss, func(w *writer, s schema.MachineSample) { putTimedSample(w, start, s) })
}

func getTimedSample(r *reader, start time.Time) schema.MachineSample {
	t := at(start, r.uvarint(), time.Second)
	s := getSample(r)
	s.At = t
	return s
}

func putTimedSample(w *writer, start time.Time, s schema.MachineSample) {
	w.uvarint(offset(start, s.At, time.Second))
	putSample(w, s)
}

// capped adds v to items in time order, or, when items hold
// MaxTransitionsPerDay already, replaces the last with v if v is newer.
func capped[T any](items []T, v T, at func(T) time.Time) []T {
	if n := len(items); n >= MaxTransitionsPerDay {
		if !at(v).Before(at(items[n-1])) {
			items[n-1] = v
		}
		return items
	}
	return insert(items, v, at)
}

func checkNames(tenant, machine string) error {
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	return checkName("machine", machine)
}
