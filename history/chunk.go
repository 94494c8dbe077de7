package history

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/store"
)

// Kinds of chunk, the letter in their keys.
const (
	kindTransitions = "t"
	// kindSamples are the gauges at full resolution, keyed by their hour
	// first, so that the chunks a minute's samples of a tenant append to
	// lie side by side: keyed by machine first (kindMachineSamples), each
	// machine's older hours lay between them, and a fleet's minute
	// rewrote a page of the store for nearly every machine.
	kindSamples = "m"
	// kindMachineSamples are gauges at full resolution as they were
	// written before, keyed by machine first: read and downsampled as
	// kindSamples are, until they age out of Options.Full.
	kindMachineSamples = "s"
	kindDownsampled    = "d"
	kindAvailability   = "a"
	kindMarks          = "k"
)

// hourly says whether chunks of kind hold an hour (else a day).
func hourly(kind string) bool { return kind == kindSamples || kind == kindMachineSamples }

// tenantPrefix is the prefix of every chunk of tenant; indexPrefix that of
// the index of tenants with history, which Tenants reads.
const (
	chunkPrefix = "h/"
	indexPrefix = "hi/"
)

func tenantPrefix(tenant string) string { return chunkPrefix + tenant + "/" }

// chunkKey is the key of the chunk of kind starting at start, of machine
// when the kind is a machine's.
func chunkKey(tenant, kind, machine string, start time.Time) string {
	k := tenantPrefix(tenant) + kind + "/"
	at := fmt.Sprintf("%010d", start.Unix())
	switch {
	case kind == kindSamples:
		return k + at + "/" + machine
	case machine != "":
		return k + machine + "/" + at
	}
	return k + at
}

// parsedKey is a chunk key taken apart.
type parsedKey struct {
	kind, machine string
	start         time.Time
}

// parseKey takes apart key, a chunk key of tenant.
func parseKey(tenant, key string) (parsedKey, error) {
	parts := strings.Split(strings.TrimPrefix(key, tenantPrefix(tenant)), "/")
	var p parsedKey
	at := parts[len(parts)-1]
	switch {
	case len(parts) == 2:
		p.kind = parts[0]
	case len(parts) == 3 && parts[0] == kindSamples:
		p.kind, at, p.machine = parts[0], parts[1], parts[2]
	case len(parts) == 3:
		p.kind, p.machine = parts[0], parts[1]
	default:
		return p, fmt.Errorf("history key %q: %w", key, errCorrupt)
	}
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return p, fmt.Errorf("history key %q: %w", key, errCorrupt)
	}
	p.start = time.Unix(sec, 0).UTC()
	return p, nil
}

// checkName refuses a tenant or machine name that would not make a key.
func checkName(what, name string) error {
	if name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("history: %s name %q: want a non-empty name without '/'", what, name)
	}
	return nil
}

// load returns the chunk under key decoded by get, none when there is no
// such chunk.
func load[T any](tx store.Tx, key string, get func(*reader) T) ([]T, error) {
	data, err := tx.Series(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decode(key, data, get)
}

// decode decodes every entry of data, the chunk under key.
func decode[T any](key string, data []byte, get func(*reader) T) ([]T, error) {
	r := &reader{b: data}
	var out []T
	for r.more() {
		v := get(r)
		if r.err != nil {
			break
		}
		out = append(out, v)
	}
	if r.err != nil {
		return nil, fmt.Errorf("history %s: %w", key, r.err)
	}
	return out, nil
}

// save encodes items with put and stores them under key.
func save[T any](tx store.Tx, key string, header []byte, items []T, put func(*writer, T)) error {
	w := &writer{b: header}
	for _, it := range items {
		put(w, it)
	}
	return tx.PutSeries(key, w.b)
}

// insert puts v among items in time order (after those of the same time).
func insert[T any](items []T, v T, at func(T) time.Time) []T {
	i := len(items)
	for i > 0 && at(items[i-1]).After(at(v)) {
		i--
	}
	return slices.Insert(items, i, v)
}

// dayOf and hourOf are the starts of the UTC day and hour of t.
func dayOf(t time.Time) time.Time  { return t.UTC().Truncate(day) }
func hourOf(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// markTenant records tenant in the index of tenants with history.
func markTenant(tx store.Tx, tenant string) error {
	if _, err := tx.Series(indexPrefix + tenant); err == nil {
		return nil
	}
	return tx.PutSeries(indexPrefix+tenant, []byte{1})
}

// Tenants returns the tenants that have history, in name order.
func Tenants(tx store.Tx) ([]string, error) {
	var out []string
	err := tx.ScanSeries(indexPrefix, func(key string, _ []byte) error {
		out = append(out, strings.TrimPrefix(key, indexPrefix))
		return nil
	})
	return out, err
}

// Forget removes every chunk of tenant's history.
func Forget(tx store.Tx, tenant string) error {
	if err := checkName("tenant", tenant); err != nil {
		return err
	}
	var keys []string
	err := tx.ScanSeries(tenantPrefix(tenant), func(key string, _ []byte) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return err
	}
	keys = append(keys, indexPrefix+tenant)
	for _, k := range keys {
		if err := tx.DeleteSeries(k); err != nil {
			return err
		}
	}
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
