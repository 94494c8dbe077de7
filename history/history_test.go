package history_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

var t0 = time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)

func open(t testing.TB, dir string) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(dir, &bolt.Options{OpenTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func update(t testing.TB, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func view(t testing.TB, s store.Store, fn func(store.Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatal(err)
	}
}

func state(at time.Time, stage schema.MachineStage, ready bool) schema.MachineTransition {
	return schema.MachineTransition{At: at, Stage: stage, Ready: ready, Connected: true, ConfigUpToDate: ready}
}

// TestTransitions: transitions come back in time order with their times
// to the millisecond, a repeated state is not recorded again, and a query
// from a later time is led by the state the machine was in then.
func TestTransitions(t *testing.T) {
	s := open(t, t.TempDir())
	at := t0.Add(23*time.Hour + 59*time.Minute)
	want := []schema.MachineTransition{
		state(at, schema.StageReady, true),
		state(at.Add(30*time.Second+5*time.Millisecond), schema.StageUpdating, false),
		state(at.Add(90*time.Second), schema.StageRestarting, false), // the next day
		state(at.Add(150*time.Second), schema.StageReady, true),
	}
	update(t, s, func(tx store.Tx) error {
		for _, tr := range []schema.MachineTransition{want[0], want[1], want[3], want[2]} {
			if err := history.RecordTransition(tx, "acme", "cp-1", tr); err != nil {
				return err
			}
		}
		return history.RecordTransition(tx, "acme", "cp-1", state(at.Add(time.Hour), schema.StageReady, true))
	})
	view(t, s, func(tx store.Tx) error {
		h, err := history.Machine(tx, "acme", "cp-1", history.Query{Since: t0})
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, h.Transitions); diff != "" {
			t.Errorf("transitions (-want +got):\n%s", diff)
		}
		h, err = history.Machine(tx, "acme", "cp-1", history.Query{Since: at.Add(100 * time.Second)})
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want[2:], h.Transitions); diff != "" {
			t.Errorf("transitions from the restart on, led by it (-want +got):\n%s", diff)
		}
		if _, err := history.Machine(tx, "acme", "cp-2", history.Query{Since: t0}); !isNotFound(err) {
			t.Errorf("machine with no history: %v, want ErrNotFound", err)
		}
		return nil
	})
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, store.ErrNotFound) }

// sample is a machine's gauges at minute i of the test's days.
func sample(i int) schema.MachineSample {
	return schema.MachineSample{Load1: float64(i%400) / 100, MemoryUsedBytes: uint64(1+i%3) << 30,
		MemoryTotalBytes: 4 << 30, EtcdDBSizeBytes: int64(20<<20 + i*4096), EtcdLeader: i%2 == 0}
}

// recordDays records a sample a minute for days days from t0 of machine
// cp-1 and a transition an hour.
func recordDays(t testing.TB, s store.Store, days int) {
	t.Helper()
	for h := range days * 24 {
		update(t, s, func(tx store.Tx) error {
			for m := range 60 {
				i := h*60 + m
				at := t0.Add(time.Duration(i) * time.Minute)
				if err := history.RecordSamples(tx, "acme", at, map[string]schema.MachineSample{"cp-1": sample(i)}); err != nil {
					return err
				}
			}
			return history.RecordTransition(tx, "acme", "cp-1", state(t0.Add(time.Duration(h)*time.Hour), schema.StageReady, h%2 == 0))
		})
	}
}

// TestRetention: samples older than Full are downsampled to Step (the
// mean load and memory of each step, the last etcd facts), anything
// older than Keep is dropped, and compacting again after a reopen changes
// nothing.
func TestRetention(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	recordDays(t, s, 4)
	now := t0.Add(4 * day)
	o := history.Options{Full: 24 * time.Hour, Step: time.Hour, Keep: 48 * time.Hour}
	update(t, s, func(tx store.Tx) error { return history.Compact(tx, "acme", now, o) })
	s.Close()
	s = open(t, dir)
	var before *schema.MachineHistory
	view(t, s, func(tx store.Tx) error {
		h, err := history.Machine(tx, "acme", "cp-1", history.Query{Since: t0})
		before = &h
		return err
	})
	h := *before
	if h.Step != 3600 {
		t.Errorf("step %d, want 3600 (downsampled samples in the window)", h.Step)
	}
	// Days 0 and 1 are past Keep; day 2 is downsampled; day 3 is full.
	if got, want := len(h.Samples), 24+24*60; got != want {
		t.Fatalf("%d samples, want %d (24 hourly, then %d a minute)", got, want, 24*60)
	}
	if first := h.Samples[0].At; !first.Equal(t0.Add(2 * day)) {
		t.Errorf("first sample at %s, want %s (days before are past keep)", first, t0.Add(2*day))
	}
	hour := h.Samples[1] // 02:00 … 02:59 of day 2: minutes i = 2*1440+60 …
	var load, used float64
	for m := range 60 {
		load += sample(2*1440 + 60 + m).Load1
		used += float64(sample(2*1440 + 60 + m).MemoryUsedBytes)
	}
	last := sample(2*1440 + 60 + 59)
	if d := hour.Load1 - load/60; d > 0.01 || d < -0.01 {
		t.Errorf("downsampled load %v, want the mean %v", hour.Load1, load/60)
	}
	if d := float64(hour.MemoryUsedBytes) - used/60; d > 2048 || d < -2048 {
		t.Errorf("downsampled memory used %d, want the mean %.0f", hour.MemoryUsedBytes, used/60)
	}
	if hour.EtcdDBSizeBytes != last.EtcdDBSizeBytes || hour.EtcdLeader != last.EtcdLeader || !hour.At.Equal(t0.Add(2*day+time.Hour)) {
		t.Errorf("downsampled hour %+v, want at %s the last etcd facts %d %v", hour, t0.Add(2*day+time.Hour), last.EtcdDBSizeBytes, last.EtcdLeader)
	}
	if got := h.Samples[24]; !got.At.Equal(t0.Add(3*day)) || got.Load1 != sample(3*1440).Load1 {
		t.Errorf("first full-resolution sample %+v, want minute 0 of day 3", got)
	}
	if n := len(h.Transitions); n != 48 || !h.Transitions[0].At.Equal(t0.Add(2*day)) {
		t.Errorf("%d transitions from %v, want 48 from %s (days before are past keep)", n, h.Transitions[0].At, t0.Add(2*day))
	}
	update(t, s, func(tx store.Tx) error { return history.Compact(tx, "acme", now, o) })
	view(t, s, func(tx store.Tx) error {
		again, err := history.Machine(tx, "acme", "cp-1", history.Query{Since: t0})
		if diff := cmp.Diff(h, again); diff != "" {
			t.Errorf("a second compaction changed the history (-first +second):\n%s", diff)
		}
		return err
	})
}

const day = 24 * time.Hour

// TestMachineDayBytes: a machine's day (a sample a minute, 20
// transitions) takes a bounded number of bytes, at typical and at widest
// values.
func TestMachineDayBytes(t *testing.T) {
	for _, c := range []struct {
		name   string
		sample func(int) schema.MachineSample
		stage  schema.MachineStage
		n      int
		limit  int
	}{
		{"typical", sample, schema.StageConfiguring, 20, 32 << 10},
		{"widest", func(i int) schema.MachineSample {
			// Every gauge at its widest, the total and the DB size swinging
			// from one extreme to the other.
			total, db := uint64(1<<64-1), int64(1<<63-1)
			if i%2 == 1 {
				total, db = 1<<63, 1
			}
			return schema.MachineSample{Load1: 1e12, MemoryUsedBytes: 1<<64 - 1, MemoryTotalBytes: total, EtcdDBSizeBytes: db, EtcdLeader: true}
		}, schema.MachineStage(fmt.Sprintf("%040d", 0)), 2 * history.MaxTransitionsPerDay, history.MaxMachineDayBytes},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			update(t, s, func(tx store.Tx) error {
				for i := range 24 * 60 {
					at := t0.Add(time.Duration(i)*time.Minute + 59*time.Second)
					if err := history.RecordSamples(tx, "acme", at, map[string]schema.MachineSample{"cp-1": c.sample(i)}); err != nil {
						return err
					}
				}
				for i := range c.n {
					tr := state(t0.Add(time.Duration(i)*40*time.Second), c.stage, i%2 == 0)
					if err := history.RecordTransition(tx, "acme", "cp-1", tr); err != nil {
						return err
					}
				}
				return nil
			})
			if c.name == "typical" {
				checkSamplesRoundTrip(t, s, c.sample)
			}
			n := seriesBytes(t, s, "h/acme/")
			t.Logf("%s day: %d bytes per machine (bound %d)", c.name, n, history.MaxMachineDayBytes)
			if n > c.limit {
				t.Errorf("%s day takes %d bytes, want at most %d", c.name, n, c.limit)
			}
		})
	}
}

// checkSamplesRoundTrip fails t unless cp-1's samples of the day read
// back as sample(i) gave them, at minute i (59 s into it).
func checkSamplesRoundTrip(t *testing.T, s store.Store, sample func(int) schema.MachineSample) {
	t.Helper()
	view(t, s, func(tx store.Tx) error {
		h, err := history.Machine(tx, "acme", "cp-1", history.Query{Since: t0, Until: t0.Add(day)})
		if err != nil {
			return err
		}
		if len(h.Samples) != 24*60 {
			t.Fatalf("%d samples, want %d", len(h.Samples), 24*60)
		}
		for i, got := range h.Samples {
			want := sample(i)
			want.At = t0.Add(time.Duration(i)*time.Minute + 59*time.Second)
			if got != want {
				t.Fatalf("sample %d: %+v, want %+v", i, got, want)
			}
		}
		return nil
	})
}

// seriesBytes sums the bytes of the series area under prefix.
func seriesBytes(t testing.TB, s store.Store, prefix string) int {
	t.Helper()
	n := 0
	view(t, s, func(tx store.Tx) error {
		return tx.ScanSeries(prefix, func(_ string, data []byte) error {
			n += len(data)
			return nil
		})
	})
	return n
}

// TestTenantHistory: a tenant's history has its availability changes led
// by the one before the window, each machine's transitions, its marks,
// and a resampled step; Forget removes all of it and the index entry.
func TestTenantHistory(t *testing.T) {
	s := open(t, t.TempDir())
	update(t, s, func(tx store.Tx) error {
		for i, a := range []schema.TenantAvailability{{Ready: 0, Desired: 3}, {Ready: 0, Desired: 3}, {Ready: 2, Desired: 3}, {Ready: 3, Desired: 3, APIReady: true}} {
			a.At = t0.Add(time.Duration(i) * time.Hour)
			if err := history.RecordAvailability(tx, "acme", a); err != nil {
				return err
			}
		}
		for _, m := range []string{"w-2", "cp-1"} {
			if err := history.RecordTransition(tx, "acme", m, state(t0.Add(time.Minute), schema.StageReady, true)); err != nil {
				return err
			}
		}
		if err := history.RecordMark(tx, "acme", schema.HistoryMark{At: t0.Add(2 * time.Hour), Kind: schema.MarkRolloutStarted, Message: "talos v1.13.0"}); err != nil {
			return err
		}
		return history.RecordTransition(tx, "other", "x", state(t0, schema.StageReady, true))
	})
	view(t, s, func(tx store.Tx) error {
		h, err := history.Tenant(tx, "acme", history.Query{Since: t0.Add(90 * time.Minute), Until: t0.Add(5 * time.Hour)})
		if err != nil {
			return err
		}
		want := []schema.TenantAvailability{{At: t0, Desired: 3}, {At: t0.Add(2 * time.Hour), Ready: 2, Desired: 3}, {At: t0.Add(3 * time.Hour), Ready: 3, Desired: 3, APIReady: true}}
		if diff := cmp.Diff(want, h.Availability); diff != "" {
			t.Errorf("availability (-want +got):\n%s", diff)
		}
		if len(h.Machines) != 2 || h.Machines[0].Machine != "cp-1" || h.Machines[1].Machine != "w-2" || len(h.Machines[0].Transitions) != 1 {
			t.Errorf("machines %+v, want cp-1 and w-2 each led by its state", h.Machines)
		}
		if len(h.Marks) != 1 || h.Marks[0].Kind != schema.MarkRolloutStarted || h.Marks[0].Message != "talos v1.13.0" {
			t.Errorf("marks %+v, want the rollout's start", h.Marks)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error { return history.Forget(tx, "acme") })
	view(t, s, func(tx store.Tx) error {
		tenants, err := history.Tenants(tx)
		if !cmp.Equal(tenants, []string{"other"}) {
			t.Errorf("tenants with history after forgetting acme: %v, want [other]", tenants)
		}
		return err
	})
	if n := seriesBytes(t, s, "h/acme/"); n != 0 {
		t.Errorf("%d bytes of acme's history left after Forget", n)
	}
}

// TestResample: a query's step folds the samples into means per step.
func TestResample(t *testing.T) {
	s := open(t, t.TempDir())
	recordDays(t, s, 1)
	view(t, s, func(tx store.Tx) error {
		h, err := history.Machine(tx, "acme", "cp-1", history.Query{Since: t0, Until: t0.Add(day - time.Nanosecond), Step: 15 * time.Minute})
		if err != nil {
			return err
		}
		if h.Step != 900 || len(h.Samples) != 96 {
			t.Errorf("step %d with %d samples, want 900 with 96", h.Step, len(h.Samples))
		}
		return nil
	})
}

// TestSamplesWrittenInAnyOrderKeepTheSameBytes: a minute's sample after
// the chunk's last is appended to its bytes, any other rewrites the chunk;
// both give the bytes of the hour written in time order, and a second
// sample of a minute replaces the first either way.
func TestSamplesWrittenInAnyOrderKeepTheSameBytes(t *testing.T) {
	gauge := func(i int) schema.MachineSample {
		// The total and etcd's size change now and then, as the encoding
		// writes them from the entry before.
		return schema.MachineSample{Load1: float64(i%7) / 4, MemoryUsedBytes: uint64(1<<30 + i<<20),
			MemoryTotalBytes: uint64(4+i/20) << 30, EtcdDBSizeBytes: int64(20<<20 - (i%3)*4096), EtcdLeader: i%2 == 0}
	}
	write := func(order []int) map[string]string {
		s := open(t, t.TempDir())
		defer checkMinuteFive(t, s, gauge(slices.Max(order)/60*60+5), order)
		update(t, s, func(tx store.Tx) error {
			for _, i := range order {
				at := t0.Add(time.Duration(i%60)*time.Minute + time.Duration(i/60)*time.Second)
				if err := history.RecordSamples(tx, "acme", at, map[string]schema.MachineSample{"cp-1": gauge(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		chunks := map[string]string{}
		view(t, s, func(tx store.Tx) error {
			return tx.ScanSeries("h/acme/m/", func(k string, data []byte) error {
				chunks[k] = string(data)
				return nil
			})
		})
		return chunks
	}
	inOrder := make([]int, 60)
	for i := range inOrder {
		inOrder[i] = i
	}
	// 60+i is minute i again, a second later: it replaces i's sample.
	replaced := append(slices.Clone(inOrder), 60+5, 60+59)
	reversed := slices.Clone(inOrder)
	slices.Reverse(reversed)
	replacedLater := append(slices.Clone(reversed), 60+5, 60+59)
	want := write(inOrder)
	if len(want) != 1 {
		t.Fatalf("%d chunks, want 1", len(want))
	}
	if got := write(reversed); !maps.Equal(got, want) {
		t.Errorf("written backwards: %x, want %x", got, want)
	}
	if maps.Equal(write(replaced), want) {
		t.Fatal("a replaced sample changed nothing")
	}
	if got, want := write(replacedLater), write(replaced); !maps.Equal(got, want) {
		t.Errorf("replaced after writing backwards: %x, want %x", got, want)
	}
}

// checkMinuteFive fails t unless cp-1's hour has a sample a minute, and
// that of minute 5 is want, written at the second of its last writing in
// order.
func checkMinuteFive(t *testing.T, s store.Store, want schema.MachineSample, order []int) {
	t.Helper()
	view(t, s, func(tx store.Tx) error {
		h, err := history.Machine(tx, "acme", "cp-1", history.Query{Since: t0, Until: t0.Add(time.Hour)})
		if err != nil {
			return err
		}
		if len(h.Samples) != 60 {
			t.Fatalf("%d samples, want 60", len(h.Samples))
		}
		want.At = t0.Add(5*time.Minute + time.Duration(slices.Max(order)/60)*time.Second)
		if got := h.Samples[5]; got != want {
			t.Errorf("minute 5 after %v: %+v, want %+v", order[len(order)-2:], got, want)
		}
		return nil
	})
}

// TestGaugesKeyedByMachineFirstAgeOutAsBefore: the gauges a server wrote
// before their chunks were keyed by hour first are read, and downsampled
// by retention, as if they had been written now; another machine's
// chunks of the same hours stay out of a machine's history.
func TestGaugesKeyedByMachineFirstAgeOutAsBefore(t *testing.T) {
	record := func(machineFirst bool) store.Store {
		s := open(t, t.TempDir())
		recordDays(t, s, 2)
		update(t, s, func(tx store.Tx) error {
			at := t0.Add(30 * time.Hour)
			return history.RecordSamples(tx, "acme", at, map[string]schema.MachineSample{"cp-2": sample(7)})
		})
		if machineFirst {
			rekeyMachineFirst(t, s, "cp-1")
		}
		return s
	}
	machine := func(s store.Store) schema.MachineHistory {
		var h schema.MachineHistory
		view(t, s, func(tx store.Tx) error {
			var err error
			h, err = history.Machine(tx, "acme", "cp-1", history.Query{Since: t0, Until: t0.Add(2 * day)})
			return err
		})
		return h
	}
	now, hourFirst, machineFirst := t0.Add(2*day), record(false), record(true)
	want := machine(hourFirst)
	if len(want.Samples) != 2*24*60 {
		t.Fatalf("%d samples, want %d", len(want.Samples), 2*24*60)
	}
	if diff := cmp.Diff(want, machine(machineFirst)); diff != "" {
		t.Errorf("keyed by machine first (-hour first +machine first):\n%s", diff)
	}
	o := history.Options{Full: 24 * time.Hour, Step: time.Hour, Keep: 30 * day}
	for _, s := range []store.Store{hourFirst, machineFirst} {
		update(t, s, func(tx store.Tx) error { return history.Compact(tx, "acme", now, o) })
	}
	want = machine(hourFirst)
	if want.Step != 3600 || len(want.Samples) != 24+24*60 {
		t.Fatalf("compacted: step %d with %d samples, want 3600 with %d", want.Step, len(want.Samples), 24+24*60)
	}
	if diff := cmp.Diff(want, machine(machineFirst)); diff != "" {
		t.Errorf("compacted, keyed by machine first (-hour first +machine first):\n%s", diff)
	}
	if n := seriesBytes(t, machineFirst, "h/acme/s/cp-1/"); n == 0 {
		t.Error("no chunk keyed by machine first is left within the full resolution's day")
	}
}

// rekeyMachineFirst moves machine's hour chunks of tenant acme to the keys
// they had before they were keyed by hour first.
func rekeyMachineFirst(t *testing.T, s store.Store, machine string) {
	t.Helper()
	update(t, s, func(tx store.Tx) error {
		moved := map[string][]byte{}
		err := tx.ScanSeries("h/acme/m/", func(k string, data []byte) error {
			hour, m, _ := strings.Cut(strings.TrimPrefix(k, "h/acme/m/"), "/")
			if m == machine {
				moved[k] = bytes.Clone(data)
				moved["h/acme/s/"+m+"/"+hour] = bytes.Clone(data)
			}
			return nil
		})
		if err != nil || len(moved) == 0 {
			return fmt.Errorf("no chunk of %s to move (%v)", machine, err)
		}
		for k, data := range moved {
			if strings.HasPrefix(k, "h/acme/m/") {
				err = tx.DeleteSeries(k)
			} else {
				err = tx.PutSeries(k, data)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
