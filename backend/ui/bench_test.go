package ui

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// The fleet of the render benchmarks: 1,000 tenants of 3 control planes
// and 5 workers (8,000 machines), and benchCommits commits that each
// have a result for every tenant, as the reconciler records them.
const (
	benchTenants = 1000
	benchCommits = 40
)

func benchRig(b *testing.B) *rig {
	b.Helper()
	r := newRig(b, rigOptions{})
	start := time.Now()
	names := make([]string, benchTenants)
	for i := range benchTenants {
		names[i] = fmt.Sprintf("tenant-%04d", i)
	}
	err := r.srv.Store().Update(func(tx store.Tx) error {
		for _, name := range names {
			for _, o := range fleet(name, 3, 5) {
				if err := putOne(tx, o); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	for c := range benchCommits {
		results := make([]schema.TenantResult, benchTenants)
		for i, name := range names {
			results[i] = schema.TenantResult{Tenant: name, Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Change: i % 3},
				StartedAt: testNow, FinishedAt: testNow.Add(time.Second)}
		}
		if c == benchCommits-1 {
			results[7].Phase, results[7].Error = schema.CommitFailed, "tofu apply: Error: quota exceeded"
		}
		r.put(commit(sha(c), fmt.Sprintf("Change %d", c), testNow.Add(time.Duration(c-benchCommits)*time.Minute), schema.CommitSucceeded, results...))
	}
	b.Logf("filled the store with %d tenants, %d machines and %d commits in %v", benchTenants, benchTenants*8, benchCommits, time.Since(start).Round(time.Millisecond))
	return r
}

// benchPage renders path over and over; cold drops the commit summaries
// the dashboard keeps before each render, as after a restart.
func benchPage(b *testing.B, path, want string, cold bool) {
	benchRender(b, benchRig(b), path, want, cold)
}

// benchRender renders path of r over and over, as benchPage.
func benchRender(b *testing.B, r *rig, path, want string, cold bool) {
	var size int
	cpu0 := cpuTime(b)
	for b.Loop() {
		if cold {
			r.ui.cache = summaryCache{}
		}
		rec := httptest.NewRecorder()
		r.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d", path, rec.Code)
		}
		body, _ := io.ReadAll(rec.Result().Body)
		size = len(body)
		if want != "" && !bytes.Contains(body, []byte(want)) {
			b.Fatalf("GET %s has no %q", path, want)
		}
	}
	// On a shared machine the wall time per page includes waiting for a
	// core; the process's CPU time per page does not.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(size), "bytes/page")
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOverview renders the overview of the whole fleet: its first
// page of tenants (a failing one first), the timeline and the source.
func BenchmarkOverview(b *testing.B) { benchPage(b, "/", `href="/tenants/tenant-0007"`, false) }

// BenchmarkOverviewCold is BenchmarkOverview without the commit summaries
// the dashboard keeps, as after a restart.
func BenchmarkOverviewCold(b *testing.B) { benchPage(b, "/", `href="/tenants/tenant-0007"`, true) }

// BenchmarkTenantPage renders one tenant of the fleet with its history.
func BenchmarkTenantPage(b *testing.B) {
	benchPage(b, "/tenants/tenant-0500", `data-machine="tenant-0500-workers-4"`, false)
}

// BenchmarkTenantPageCold is BenchmarkTenantPage without the commit
// summaries the dashboard keeps.
func BenchmarkTenantPageCold(b *testing.B) {
	benchPage(b, "/tenants/tenant-0500", `data-machine="tenant-0500-workers-4"`, true)
}

// recordFleetDay records a day like rollingUpgrade's for every tenant of
// the bench fleet: each machine's transitions through a rolling upgrade,
// the tenant's availability and marks.
func recordFleetDay(b *testing.B, r *rig) {
	b.Helper()
	day := rollingUpgrade()
	start := time.Now()
	for i := range benchTenants {
		tenant := fmt.Sprintf("tenant-%04d", i)
		err := r.srv.Store().Update(func(tx store.Tx) error {
			for j, o := range fleet(tenant, 3, 5) {
				m, ok := o.(*schema.Machine)
				if !ok {
					continue
				}
				for _, t := range day.Machines[j%len(day.Machines)].Transitions {
					if err := history.RecordTransition(tx, tenant, m.Metadata.Name, t); err != nil {
						return err
					}
				}
			}
			for _, a := range day.Availability {
				if err := history.RecordAvailability(tx, tenant, a); err != nil {
					return err
				}
			}
			for _, mk := range day.Marks {
				if err := history.RecordMark(tx, tenant, mk); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("recorded a day of history for %d tenants in %v", benchTenants, time.Since(start).Round(time.Millisecond))
}

// BenchmarkOverviewHistory is BenchmarkOverview with a day of history
// for every tenant: the page draws an availability bar for each of its
// tenants.
func BenchmarkOverviewHistory(b *testing.B) {
	r := benchRig(b)
	recordFleetDay(b, r)
	benchRender(b, r, "/", `data-chart="availability"`, false)
}

// BenchmarkTenantPageHistory is BenchmarkTenantPage with a day of
// history: the page draws the timeline of its eight machines.
func BenchmarkTenantPageHistory(b *testing.B) {
	r := benchRig(b)
	recordFleetDay(b, r)
	benchRender(b, r, "/tenants/tenant-0500", `data-band="tenant-0500-workers-4"`, false)
}
