package history

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// The chunks are sequences of entries, each starting with its offset from
// the chunk's start as a uvarint: milliseconds for transitions,
// availability and marks, seconds for samples. Numbers are uvarints;
// strings a uvarint length and their bytes. Load is kept in hundredths,
// memory in KiB (as Talos reports it), so an entry is about ten bytes.

// errCorrupt says a chunk does not decode.
var errCorrupt = errors.New("history chunk does not decode")

// Limits that bound the bytes an entry takes.
const (
	maxStage   = 32  // bytes of a stage name kept
	maxName    = 63  // bytes of a machine name or mark kind kept
	maxMessage = 200 // bytes of a mark's message kept
)

// Flags of a transition.
const (
	flagReady byte = 1 << iota
	flagConnected
	flagConfigUpToDate
)

// Flags of a sample.
const (
	flagEtcd byte = 1 << iota
	flagLeader
	flagSameTotal
)

// writer appends entries to a chunk. total and db are the memory total
// (KiB) and etcd DB size of the last sample written, from which the next
// one is written.
type writer struct {
	b     []byte
	total uint64
	db    int64
}

func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) byte(v byte)      { w.b = append(w.b, v) }
func (w *writer) string(s string, max int) {
	if len(s) > max {
		s = s[:max]
	}
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

// reader reads a chunk's entries; the first error sticks. total and db
// are as the writer's.
type reader struct {
	b     []byte
	err   error
	total uint64
	db    int64
}

func (r *reader) more() bool { return r.err == nil && len(r.b) > 0 }

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errCorrupt
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// at is start plus off units, in UTC.
func at(start time.Time, off uint64, unit time.Duration) time.Time {
	return start.Add(time.Duration(off) * unit).UTC()
}

// offset is t's distance from start in units, never below zero.
func offset(start, t time.Time, unit time.Duration) uint64 {
	d := t.Sub(start)
	if d < 0 {
		return 0
	}
	return uint64(d / unit)
}

func putTransition(w *writer, start time.Time, t schema.MachineTransition) {
	w.uvarint(offset(start, t.At, time.Millisecond))
	w.string(string(t.Stage), maxStage)
	var f byte
	if t.Ready {
		f |= flagReady
	}
	if t.Connected {
		f |= flagConnected
	}
	if t.ConfigUpToDate {
		f |= flagConfigUpToDate
	}
	w.byte(f)
}

func getTransition(r *reader, start time.Time) schema.MachineTransition {
	t := schema.MachineTransition{At: at(start, r.uvarint(), time.Millisecond)}
	t.Stage = schema.MachineStage(r.string())
	f := r.byte()
	t.Ready, t.Connected, t.ConfigUpToDate = f&flagReady != 0, f&flagConnected != 0, f&flagConfigUpToDate != 0
	return t
}

// putSample writes s's gauges (not its time). Within a chunk, memory
// total is written only when it differs from the entry before, and etcd's
// DB size as its change from the one before, so a sample a minute takes
// about ten bytes.
func putSample(w *writer, s schema.MachineSample) {
	load := s.Load1 * 100
	if !(load > 0) || math.IsInf(load, 0) {
		load = 0
	}
	w.uvarint(uint64(math.Round(min(load, math.MaxUint32))))
	w.uvarint(s.MemoryUsedBytes >> 10)
	total := s.MemoryTotalBytes >> 10
	var f byte
	if s.EtcdDBSizeBytes > 0 {
		f |= flagEtcd
	}
	if s.EtcdLeader {
		f |= flagLeader
	}
	if total == w.total {
		f |= flagSameTotal
	}
	w.byte(f)
	if f&flagSameTotal == 0 {
		w.uvarint(total)
		w.total = total
	}
	if f&flagEtcd != 0 {
		w.b = binary.AppendVarint(w.b, s.EtcdDBSizeBytes-w.db)
		w.db = s.EtcdDBSizeBytes
	}
}

func getSample(r *reader) schema.MachineSample {
	var s schema.MachineSample
	s.Load1 = float64(r.uvarint()) / 100
	s.MemoryUsedBytes = r.uvarint() << 10
	f := r.byte()
	if f&flagSameTotal == 0 {
		r.total = r.uvarint()
	}
	s.MemoryTotalBytes = r.total << 10
	if f&flagEtcd != 0 {
		r.db += r.varint()
		s.EtcdDBSizeBytes = r.db
	}
	s.EtcdLeader = f&flagLeader != 0
	return s
}

func putAvailability(w *writer, start time.Time, a schema.TenantAvailability) {
	w.uvarint(offset(start, a.At, time.Millisecond))
	w.uvarint(uint64(max(a.Ready, 0)))
	w.uvarint(uint64(max(a.Desired, 0)))
	var f byte
	if a.APIReady {
		f = 1
	}
	w.byte(f)
}

func getAvailability(r *reader, start time.Time) schema.TenantAvailability {
	a := schema.TenantAvailability{At: at(start, r.uvarint(), time.Millisecond)}
	a.Ready, a.Desired = int(min(r.uvarint(), math.MaxInt32)), int(min(r.uvarint(), math.MaxInt32))
	a.APIReady = r.byte() != 0
	return a
}

func putMark(w *writer, start time.Time, m schema.HistoryMark) {
	w.uvarint(offset(start, m.At, time.Millisecond))
	w.string(m.Kind, maxName)
	w.string(m.Machine, maxName)
	w.string(m.Message, maxMessage)
}

func getMark(r *reader, start time.Time) schema.HistoryMark {
	m := schema.HistoryMark{At: at(start, r.uvarint(), time.Millisecond)}
	m.Kind, m.Machine, m.Message = r.string(), r.string(), r.string()
	return m
}
