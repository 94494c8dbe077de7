package notify

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// stormTenants and stormRounds size the event storm: every tenant fails,
// and fails again at each of its retries, stormRounds times in all.
const stormTenants, stormRounds = 1000, 3

// BenchmarkEventStorm: 1,000 tenants fail at once, three times each, and
// every event goes to three providers (a Slack webhook, PagerDuty and a
// generic webhook) on loopback receivers that answer at once. It reports
// the caller's cost of Notify per event and for the whole storm, the
// messages each provider got (the first wave while the storm lasts, and
// all after the coalescing window), and the heap the queues hold at the
// storm's peak and after.
func BenchmarkEventStorm(b *testing.B) {
	var notifyTotal time.Duration
	var firstWave, messages, peakHeap, afterHeap float64
	for range b.N {
		rcvs := []*counter{newCounter(b), newCounter(b), newCounter(b)}
		path := writeFiles(b, map[string]string{"slack-url": rcvs[0].srv.URL + "/services/T/B/x", "pd-key": "R0UT1NGKEY", "notifications.yaml": `
providers:
  - {name: slack, type: slack, addressFile: slack-url}
  - {name: pagerduty, type: pagerduty, address: "` + rcvs[1].srv.URL + `", secretFile: pd-key}
  - {name: hook, type: webhook, address: "` + rcvs[2].srv.URL + `"}
alerts:
  - {name: failures, providers: [slack, pagerduty, hook], severities: [error]}
`})
		base := heapNow()
		h := start(b, path, true)
		events := make([]Event, stormTenants)
		for i := range events {
			events[i] = event(ReconcileFailed, fmt.Sprintf("tenant-%04d", i))
		}
		began := time.Now()
		for range stormRounds {
			for _, ev := range events {
				h.n.Notify(ev)
			}
		}
		notifyTotal += time.Since(began)
		peakHeap += float64(heapNow()-base) / (1 << 20)
		for _, r := range rcvs { // one message per tenant leaves at once
			waitCount(b, r, stormTenants)
		}
		held := make([]int, len(rcvs))
		for i, s := range h.n.sinks {
			held[i] = s.q.length()
		}
		firstWave += float64(rcvs[0].count()+rcvs[1].count()+rcvs[2].count()) / 3
		h.clock.advance(h.n.cfg.CoalesceWindow) // the repeats leave at the window's end
		total := 0
		for i, r := range rcvs {
			total += waitCount(b, r, stormTenants+held[i])
		}
		messages += float64(total) / 3
		h.stop()
		afterHeap += float64(heapNow()-base) / (1 << 20)
		runtime.KeepAlive(h)
	}
	n := float64(b.N)
	b.ReportMetric(float64(notifyTotal.Nanoseconds())/n/(stormTenants*stormRounds), "notify-ns/event")
	b.ReportMetric(float64(notifyTotal.Microseconds())/n/1000, "notify-ms/storm")
	b.ReportMetric(firstWave/n, "msgs/provider-first-wave")
	b.ReportMetric(messages/n, "msgs/provider")
	b.ReportMetric(stormTenants*stormRounds, "events/provider")
	b.ReportMetric(peakHeap/n, "heap-MiB-peak")
	b.ReportMetric(afterHeap/n, "heap-MiB-after")
}

// counter is a receiver that only counts what it gets, so that the heap
// measured is the notifier's.
type counter struct {
	srv *httptest.Server
	n   atomic.Int64
}

func newCounter(b *testing.B) *counter {
	c := &counter{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		c.n.Add(1)
	}))
	b.Cleanup(c.srv.Close)
	return c
}

func (c *counter) count() int { return int(c.n.Load()) }

// waitCount waits until r got at least want requests, and returns how
// many it got.
func waitCount(b *testing.B, r *counter, want int) int {
	deadline := time.Now().Add(time.Minute)
	for r.count() < want {
		if time.Now().After(deadline) {
			b.Fatalf("the receiver got %d messages, want %d", r.count(), want)
		}
		time.Sleep(time.Millisecond)
	}
	return r.count()
}

func heapNow() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkNotify: the caller's cost of one event matched by an alert of
// three providers, with nothing delivering (the queues stay full and drop
// their oldest).
func BenchmarkNotify(b *testing.B) {
	path := writeFiles(b, map[string]string{"notifications.yaml": `
providers:
  - {name: a, type: webhook, address: "http://127.0.0.1:1/"}
  - {name: b, type: webhook, address: "http://127.0.0.1:1/"}
  - {name: c, type: webhook, address: "http://127.0.0.1:1/"}
alerts:
  - {name: failures, providers: [a, b, c], severities: [error], tenants: {selector: env=prod}}
`})
	h := start(b, path, false)
	events := make([]Event, stormTenants)
	for i := range events {
		events[i] = event(ReconcileFailed, fmt.Sprintf("tenant-%04d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		h.n.Notify(events[i%len(events)])
	}
}
