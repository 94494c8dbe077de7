package history

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// agg is a downsampled sample: the mean of n samples' load and memory
// used, and the last one's memory total and etcd facts.
type agg struct {
	s schema.MachineSample
	n uint64
}

// fold adds the later b to a.
func fold(a, b agg) agg {
	n := a.n + b.n
	out := b
	out.s.At = a.s.At
	out.n = n
	out.s.Load1 = (a.s.Load1*float64(a.n) + b.s.Load1*float64(b.n)) / float64(n)
	used := (float64(a.s.MemoryUsedBytes)*float64(a.n) + float64(b.s.MemoryUsedBytes)*float64(b.n)) / float64(n)
	out.s.MemoryUsedBytes = uint64(math.Round(used))
	return out
}

// A downsampled chunk starts with its step in seconds; each entry is its
// offset in seconds from the day's start, its count and the sample.
func getAgg(r *reader, start time.Time) agg {
	t := at(start, r.uvarint(), time.Second)
	n := r.uvarint()
	s := getSample(r)
	s.At = t
	return agg{s: s, n: max(n, 1)}
}

func putAgg(w *writer, start time.Time, a agg) {
	w.uvarint(offset(start, a.s.At, time.Second))
	w.uvarint(a.n)
	putSample(w, a.s)
}

// loadDownsampled returns the downsampled chunk under key and its step;
// none and 0 when there is none.
func loadDownsampled(data []byte, key string, start time.Time) ([]agg, time.Duration, error) {
	if len(data) == 0 {
		return nil, 0, nil
	}
	step, n := binary.Uvarint(data)
	if n <= 0 {
		return nil, 0, fmt.Errorf("history %s: %w", key, errCorrupt)
	}
	as, err := decode(key, data[n:], func(r *reader) agg { return getAgg(r, start) })
	return as, time.Duration(step) * time.Second, err
}

// Compact applies the retention o to tenant's history as of now: samples
// older than o.Full are downsampled to o.Step, and chunks whose whole day
// (or hour) is older than o.Keep are dropped. Compacting again changes
// nothing; a Compact that fails leaves the transaction's caller to roll
// it back whole.
func Compact(tx store.Tx, tenant string, now time.Time, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	fullFrom, keepFrom := now.Add(-o.Full), now.Add(-o.Keep)
	var downsample, drop []string
	err = tx.ScanSeries(tenantPrefix(tenant), func(key string, _ []byte) error {
		p, err := parseKey(tenant, key)
		if err != nil {
			return err
		}
		span := day
		if hourly(p.kind) {
			span = time.Hour
		}
		switch end := p.start.Add(span); {
		case !end.After(keepFrom):
			drop = append(drop, key)
		case hourly(p.kind) && !end.After(fullFrom):
			downsample = append(downsample, key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("compact history of %s: %w", tenant, err)
	}
	for _, key := range downsample {
		if err := downsampleChunk(tx, tenant, key, o.Step); err != nil {
			return fmt.Errorf("compact history of %s: %w", tenant, err)
		}
	}
	for _, key := range drop {
		if err := tx.DeleteSeries(key); err != nil {
			return err
		}
	}
	return nil
}

// downsampleChunk folds the full-resolution chunk under key into the
// downsampled chunks of its days at step, and deletes it.
func downsampleChunk(tx store.Tx, tenant, key string, step time.Duration) error {
	p, err := parseKey(tenant, key)
	if err != nil {
		return err
	}
	ss, err := load(tx, key, func(r *reader) schema.MachineSample { return getTimedSample(r, p.start) })
	if err != nil {
		return err
	}
	byDay := map[time.Time][]agg{}
	for _, s := range ss {
		d := dayOf(s.At)
		byDay[d] = append(byDay[d], agg{s: s, n: 1})
	}
	for d, as := range byDay {
		if err := mergeDownsampled(tx, chunkKey(tenant, kindDownsampled, p.machine, d), d, step, as); err != nil {
			return err
		}
	}
	return tx.DeleteSeries(key)
}

// mergeDownsampled adds the later samples as to the downsampled chunk of
// day start under key, every entry in buckets of step.
func mergeDownsampled(tx store.Tx, key string, start time.Time, step time.Duration, as []agg) error {
	data, err := seriesOrNil(tx, key)
	if err != nil {
		return err
	}
	old, _, err := loadDownsampled(data, key, start)
	if err != nil {
		return err
	}
	merged := bucketed(append(old, as...), step)
	header := binary.AppendUvarint(nil, uint64(step/time.Second))
	return save(tx, key, header, merged, func(w *writer, a agg) { putAgg(w, start, a) })
}

// bucketed folds as, in time order, into one entry per step.
func bucketed(as []agg, step time.Duration) []agg {
	var out []agg
	for _, a := range as {
		a.s.At = a.s.At.Truncate(step)
		i := len(out) - 1
		for i >= 0 && out[i].s.At.After(a.s.At) {
			i--
		}
		if i >= 0 && out[i].s.At.Equal(a.s.At) {
			out[i] = fold(out[i], a)
			continue
		}
		out = insert(out, a, func(a agg) time.Time { return a.s.At })
	}
	return out
}

// seriesOrNil returns the bytes under key, nil when there are none.
func seriesOrNil(tx store.Tx, key string) ([]byte, error) {
	data, err := tx.Series(key)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	return data, nil
}
