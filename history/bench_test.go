package history_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// stages are the ~20 transitions of a machine's simulated day: a rolling
// upgrade, a reboot and a few lost connections.
var stages = []schema.MachineStage{schema.StageReady, schema.StageUpdating, schema.StageRestarting, schema.StageConfiguring, schema.StageReady}

// recordDay records a simulated day from t0 for machines of tenant: a
// sample a minute each (one transaction a minute for the tenant, as the
// plane stores a batch) and 20 transitions each, with availability changes
// and marks.
func recordDay(b testing.TB, s store.Store, tenant string, machines int) {
	b.Helper()
	names := make([]string, machines)
	for i := range names {
		names[i] = fmt.Sprintf("%s-m-%d", tenant, i)
	}
	for i := range 24 * 60 {
		at := t0.Add(time.Duration(i) * time.Minute)
		update(b, s, func(tx store.Tx) error {
			batch := map[string]schema.MachineSample{}
			for j, m := range names {
				batch[m] = schema.MachineSample{Load1: float64((i+j)%300) / 100, MemoryUsedBytes: uint64(1<<30 + (i%97)<<20),
					MemoryTotalBytes: 4 << 30, EtcdDBSizeBytes: int64(20<<20 + i*4096), EtcdLeader: j == 0}
			}
			if err := history.RecordSamples(tx, tenant, at, batch); err != nil {
				return err
			}
			if i%72 != 0 { // 20 transitions a day
				return nil
			}
			for j, m := range names {
				tr := state(at.Add(time.Duration(j)*time.Second), stages[(i/72)%len(stages)], (i/72)%len(stages) == 0)
				if err := history.RecordTransition(tx, tenant, m, tr); err != nil {
					return err
				}
			}
			if err := history.RecordAvailability(tx, tenant, schema.TenantAvailability{At: at, Ready: (i / 72) % (machines + 1), Desired: machines, APIReady: true}); err != nil {
				return err
			}
			return history.RecordMark(tx, tenant, schema.HistoryMark{At: at, Kind: schema.MarkReboot, Machine: names[0]})
		})
	}
}

// BenchmarkMachineDay records a simulated day of 8 machines (1,440
// samples and 20 transitions each) in a bbolt file and reports the bytes
// the history keeps per machine for the day.
func BenchmarkMachineDay(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		s := open(b, b.TempDir())
		b.StartTimer()
		recordDay(b, s, "acme", 8)
		b.StopTimer()
		b.ReportMetric(float64(seriesBytes(b, s, "h/acme/"))/8, "B/machine-day")
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkTenantHistory24h answers a 24 h history of a tenant of 8
// machines (with a day of history, in a bbolt file) and of one of its
// machines, its samples included.
func BenchmarkTenantHistory24h(b *testing.B) {
	s := open(b, b.TempDir())
	recordDay(b, s, "acme", 8)
	q := history.Query{Since: t0, Until: t0.Add(24 * time.Hour)}
	b.Run("tenant", func(b *testing.B) {
		for b.Loop() {
			view(b, s, func(tx store.Tx) error {
				h, err := history.Tenant(tx, "acme", q)
				if err == nil && len(h.Machines) != 8 {
					b.Fatalf("%d machines", len(h.Machines))
				}
				return err
			})
		}
	})
	b.Run("machine", func(b *testing.B) {
		for b.Loop() {
			view(b, s, func(tx store.Tx) error {
				h, err := history.Machine(tx, "acme", "acme-m-1", q)
				if err == nil && len(h.Samples) != 1440 {
					b.Fatalf("%d samples", len(h.Samples))
				}
				return err
			})
		}
	})
}

// BenchmarkSamplesFleet stores one minute's gauges of 1,000 tenants × 8
// machines in one transaction, as the plane hands them over, into hour
// chunks that already hold 30 minutes: the fleet's first hour ("hour"),
// and an hour after a full day, when each tenant's 23 older hours of
// chunks lie between its chunks and the next tenant's ("day").
func BenchmarkSamplesFleet(b *testing.B) {
	for _, c := range []struct {
		name  string
		hours int
	}{{"hour", 0}, {"day", 23}} {
		b.Run(c.name, func(b *testing.B) {
			s := open(b, b.TempDir())
			start := t0.Add(-time.Duration(c.hours) * time.Hour)
			if c.hours > 0 {
				for i := range 60 {
					recordFleetMinute(b, s, start.Add(time.Duration(i)*time.Minute))
				}
				copyHour(b, s, start, c.hours-1)
			}
			for i := range 30 {
				recordFleetMinute(b, s, t0.Add(time.Duration(i)*time.Minute))
			}
			i := 30
			for b.Loop() {
				recordFleetMinute(b, s, t0.Add(time.Duration(i%60)*time.Minute))
				i++
			}
		})
	}
}

// recordFleetMinute stores the gauges of 1,000 tenants × 8 machines taken
// at at, in one transaction.
func recordFleetMinute(b *testing.B, s store.Store, at time.Time) {
	const tenants, machines = 1000, 8
	update(b, s, func(tx store.Tx) error {
		for t := range tenants {
			tenant := fmt.Sprintf("t%04d", t)
			ms := map[string]schema.MachineSample{}
			for m := range machines {
				ms[fmt.Sprintf("%s-m-%d", tenant, m)] = schema.MachineSample{Load1: 0.4, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 4 << 30}
			}
			if err := history.RecordSamples(tx, tenant, at, ms); err != nil {
				return err
			}
		}
		return nil
	})
}

// copyHour copies every machine's gauges of the hour from start to the n
// hours after it: a chunk's entries are offsets from the start its key
// names, so each copy reads as that hour's.
func copyHour(b *testing.B, s store.Store, start time.Time, n int) {
	from := fmt.Sprintf("/m/%010d/", start.Unix())
	chunks := map[string][]byte{}
	view(b, s, func(tx store.Tx) error {
		return tx.ScanSeries("h/", func(k string, data []byte) error {
			if strings.Contains(k, from) {
				chunks[k] = bytes.Clone(data)
			}
			return nil
		})
	})
	for h := 1; h <= n; h++ {
		to := fmt.Sprintf("/m/%010d/", start.Add(time.Duration(h)*time.Hour).Unix())
		update(b, s, func(tx store.Tx) error {
			for k, data := range chunks {
				if err := tx.PutSeries(strings.Replace(k, from, to, 1), data); err != nil {
					return err
				}
			}
			return nil
		})
	}
}
