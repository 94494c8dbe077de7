package events

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
	"github.com/rezuscloud/rezuscloud/reconciler/status"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// stormTenants is the fleet of BenchmarkEventStorm.
const stormTenants = 1000

// BenchmarkEventStorm: a fleet of 1,000 applied tenants (3 machines each)
// on bbolt, and a storm in which every tenant fails at once: one op is a
// commit record that queues them all, and each tenant's run recording
// Applying and then a failure with a retry, as the reconciler's loop
// writes them (2,001 store commits). Without notifications the store has
// no deriver; with them a Deriver runs and sends to a real Notifier whose
// generic webhook's receiver is on loopback (1,000 ReconcileFailed, one
// message each).
//
// It reports the loop's write latency (p50, p99 of the 2,001 Updates),
// the storm's wall time, how long after the last write the deriver has
// derived everything (lag), the deriver's time per change, the messages
// the receiver got, and the heap and the process's RSS after the storm.
//
//	go test -run '^$' -bench EventStorm -benchtime 5x ./events/
func BenchmarkEventStorm(b *testing.B) {
	for _, mode := range []string{"without-notifications", "deriver-only", "with-notifications"} {
		b.Run(mode, func(b *testing.B) { benchStorm(b, mode) })
	}
}

// discard is a Sink that drops every event.
type discard struct{ n atomic.Int64 }

func (s *discard) Notify(notify.Event) { s.n.Add(1) }

// benchStorm runs the storm without a deriver, with one whose events are
// dropped (deriver-only), or with one that sends them to a Notifier.
func benchStorm(b *testing.B, mode string) {
	st, err := bolt.Open(filepath.Join(b.TempDir(), "data"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	names := seedFleet(b, st)
	var got atomic.Int64
	var d *Deriver
	sunk := &discard{}
	if mode == "deriver-only" {
		if d, err = New(Options{Store: st, Sink: sunk}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		waitDone(b, st, d)
	}
	if mode == "with-notifications" {
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			got.Add(1)
		}))
		defer rcv.Close()
		cfg, err := notify.ParseConfig([]byte("coalesceWindow: 1ms\nproviders: [{name: hook, type: webhook, address: \""+rcv.URL+"\", queueSize: 4096}]\n"+
			"alerts: [{name: all, providers: [hook]}]\n"), filepath.Join(b.TempDir(), "n.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := notify.New(cfg, notify.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if d, err = New(Options{Store: st, Sink: n}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{}, 2)
		go func() { n.Run(ctx); done <- struct{}{} }()
		go func() { _ = d.Run(ctx); done <- struct{}{} }()
		defer func() { cancel(); <-done; <-done }()
		waitDone(b, st, d)
	}
	var lat []time.Duration
	var wall, lag time.Duration
	var busy0, changes0 int64
	if d != nil {
		busy0, changes0 = d.busy.Load(), d.derivedChanges.Load()
	}
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		lat = append(lat, storm(b, st, names, i)...)
		wall += time.Since(start)
		if d != nil {
			last := time.Now()
			waitDone(b, st, d)
			lag += time.Since(last)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	ops := float64(b.N)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "update-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "update-p99-µs")
	b.ReportMetric(float64(wall.Milliseconds())/ops, "storm-ms")
	if d != nil {
		b.ReportMetric(float64(lag.Microseconds())/ops/1000, "lag-ms")
		b.ReportMetric(float64(d.busy.Load()-busy0)/1000/float64(d.derivedChanges.Load()-changes0), "derive-µs/change")
	}
	if mode == "deriver-only" {
		b.ReportMetric(float64(sunk.n.Load())/ops, "events")
	}
	if mode == "with-notifications" {
		deadline := time.Now().Add(time.Minute)
		for got.Load() < int64(b.N*stormTenants) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		b.ReportMetric(float64(got.Load())/ops, "messages")
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(rssMiB(), "rss-MiB")
}

// seedFleet applies stormTenants tenants of 3 machines each, and returns
// their names.
func seedFleet(b *testing.B, st store.Store) []string {
	var names []string
	now := time.Now()
	err := st.Update(func(tx store.Tx) error {
		for i := range stormTenants {
			name := fmt.Sprintf("t%04d", i)
			names = append(names, name)
			td := desired()
			td.Tenant.Metadata.Name = name
			for _, ng := range td.NodeGroups {
				ng.Metadata.Labels = map[string]string{schema.LabelTenant: name, schema.LabelRole: ng.Metadata.Labels[schema.LabelRole]}
			}
			var ms []*schema.Machine
			for j, m := range alphaMachines() {
				id := fmt.Sprintf("%s-%d", name, j)
				ms = append(ms, storetest.Machine(id, name, m.Spec.NodeGroup, m.Spec.Role, "small", j))
			}
			if err := status.Record(tx, now).Applied(status.Apply{Desired: td, Revision: revA, Generation: 1, Machines: ms}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return names
}

// storm writes one storm: the commit record that queues every tenant, and
// every tenant's run that fails. It returns the latency of each write.
func storm(b *testing.B, st store.Store, names []string, i int) []time.Duration {
	rev := strings.Repeat(strconv.Itoa(i%10), 40)
	now := time.Now()
	results := make([]schema.TenantResult, len(names))
	for j, n := range names {
		results[j] = schema.TenantResult{Tenant: n, Phase: schema.CommitPending}
	}
	var lat []time.Duration
	write := func(fn func(tx store.Tx) error) {
		start := time.Now()
		if err := st.Update(fn); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	write(func(tx store.Tx) error {
		_, err := tx.PutObject(schema.KindCommit, schema.CommitName(rev), commit(rev, "Storm "+strconv.Itoa(i), now, schema.CommitApplying, results...))
		return err
	})
	gen := int64(i + 2)
	for _, n := range names {
		write(func(tx store.Tx) error {
			return status.Record(tx, now).Outcome(n, nil, gen, func(schema.TenantStatus) status.Outcome { return status.Applying(rev, gen) })
		})
	}
	for _, n := range names {
		write(func(tx store.Tx) error {
			return status.Record(tx, now).Outcome(n, nil, gen, func(schema.TenantStatus) status.Outcome {
				return retrying(1, "tofu apply: the cloud answered 500", now.Add(time.Minute), gen)
			})
		})
	}
	return lat
}

// waitDone waits until d has derived every change of st.
func waitDone(b *testing.B, st store.Store, d *Deriver) {
	var rv uint64
	_ = st.View(func(tx store.Tx) error { rv = tx.ResourceVersion(); return nil })
	for d.done.Load() < rv {
		time.Sleep(100 * time.Microsecond)
	}
}

// rssMiB is the process's resident set, from /proc; 0 where there is none.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}
