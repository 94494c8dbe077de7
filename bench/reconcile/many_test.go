package reconcile

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// benchManyChange measures a commit that changes -many tenants at once
// (each gains a worker, then loses it), against bare `tofu plan -out &&
// tofu apply` runs of the same changes in the same workspaces, run W at a
// time by a pool of W goroutines, W being the reconciler's workers. One op
// is four steps, so that each side adds and destroys one machine per
// tenant:
//
//	reconcile   the tenants' workers w→w+1  (one commit)
//	bare pool   w+1→w                       (every tenant, W at a time)
//	bare pool   w→w+1
//	reconcile   w+1→w                       (one commit)
//
// x-pool is the reconciler's wall time over the pool's; x-sum the
// reconciler's over the sum of the bare runs divided by W, which ignores
// the pool's idle tail. The log line splits the commits by their own
// timings.
func benchManyChange(b *testing.B, r *rig) {
	n := min(manyTenants, r.fleet.Tenants)
	low, high := r.fleet, r.fleet.WithAll(n, +1)
	tenants, changes := make([]string, n), map[string]bool{}
	lowTF, highTF, vars := map[string][]byte{}, map[string][]byte{}, map[string]string{}
	for i := range n {
		t := TenantName(i)
		tenants[i], changes[t] = t, true
		lowTF[t] = mustRead(b, filepath.Join(r.workDir(t), render.MainFile))
		vars[t] = r.varFile(b, low, t)
	}
	var rec, pool, sum time.Duration
	// The CPU time of the tofu processes (and their providers) of each
	// side: when it is equal and the wall time is not, the machine's load
	// made the difference.
	var recCPU, poolCPU time.Duration
	var split commitSplit
	sum0, _, err := r.tofuSeconds()
	if err != nil {
		b.Fatal(err)
	}
	reconcileTo := func(f Fleet, add, destroy int) {
		start, cpu := time.Now(), childCPU()
		c, err := r.reconcile(f)
		rec += time.Since(start)
		recCPU += childCPU() - cpu
		if err != nil {
			b.Fatal(err)
		}
		if c.Status.Phase != schema.CommitSucceeded {
			b.Fatalf("%s", describe(c))
		}
		changed := 0
		for _, res := range c.Status.Tenants {
			if res.OutputTail == "" && res.Plan == (schema.PlanSummary{}) {
				continue
			}
			if !changes[res.Tenant] {
				b.Fatalf("tenant %s ran tofu, though it did not change", res.Tenant)
			}
			if res.Plan.Add != add || res.Plan.Destroy != destroy || res.Plan.Change != 0 {
				b.Fatalf("tenant %s planned %+v, want +%d -%d", res.Tenant, res.Plan, add, destroy)
			}
			changed++
		}
		if changed != n {
			b.Fatalf("%d tenants ran tofu, want the %d that changed", changed, n)
		}
		split.add(c)
	}
	runPool := func(tf map[string][]byte) {
		cpu := childCPU()
		defer func() { poolCPU += childCPU() - cpu }()
		d, s, err := r.barePool(tenants, tf, vars)
		if err != nil {
			b.Fatal(err)
		}
		pool, sum = pool+d, sum+s
	}

	stopProfile := profile(b)
	b.ResetTimer()
	for range b.N {
		reconcileTo(high, 1, 0)
		if len(highTF) == 0 {
			for _, t := range tenants {
				highTF[t] = mustRead(b, filepath.Join(r.workDir(t), render.MainFile))
			}
		}
		runPool(lowTF)
		runPool(highTF)
		reconcileTo(low, 0, 1)
	}
	b.StopTimer()
	stopProfile()
	if err := r.checkMachines(low.Machines()); err != nil {
		b.Fatal(err)
	}
	sum1, _, err := r.tofuSeconds()
	if err != nil {
		b.Fatal(err)
	}
	var tofu float64
	for _, cmd := range []string{"init", "plan", "show", "apply"} {
		tofu += sum1[cmd] - sum0[cmd]
	}

	w := time.Duration(r.workers)
	perW := sum / w
	xPool, xSum := rec.Seconds()/pool.Seconds(), rec.Seconds()/perW.Seconds()
	ops := time.Duration(2 * b.N)
	b.ReportMetric(float64((rec / ops).Nanoseconds()), "ns/op")
	b.ReportMetric(float64((pool / ops).Nanoseconds()), "pool-ns/op")
	b.ReportMetric(float64((perW / ops).Nanoseconds()), "sum/W-ns/op")
	b.ReportMetric(xPool, "x-pool")
	b.ReportMetric(xSum, "x-sum/W")
	b.ReportMetric(recCPU.Seconds()/poolCPU.Seconds(), "x-tofu-cpu")
	b.Logf("%d of %d tenants changed in one commit, %d workers: reconcile %v a commit, bare runs in a pool of %d %v, their sum / %d %v: %.2f× the pool, %.2f× sum/W (target ≤ %.1f× the pool); reconcile %s; tofu in the reconciler %.1fs of %.1fs of tenant runs; CPU of the tofu processes: reconcile %.1fs, bare %.1fs",
		n, r.fleet.Tenants, r.workers, (rec / ops).Round(time.Millisecond), r.workers, (pool / ops).Round(time.Millisecond), r.workers, (perW / ops).Round(time.Millisecond),
		xPool, xSum, manyChangeTarget, split.String(int(ops)), tofu, split.runs.Seconds(), recCPU.Seconds(), poolCPU.Seconds())
	if xPool > manyChangeTarget {
		b.Errorf("%d changed tenants take %.2f× their bare tofu runs in a pool of %d, want ≤ %.1f×", n, xPool, r.workers, manyChangeTarget)
	}
}

// commitSplit adds up where the commits' time went, by their own timings.
type commitSplit struct {
	validate, firstStart, makespan, tail time.Duration
	runs                                 time.Duration // the tenants' runs, summed
}

func (s *commitSplit) add(c *schema.Commit) {
	t := c.Status.Timings
	var first, last time.Time
	for _, res := range c.Status.Tenants {
		if res.StartedAt.IsZero() || res.OutputTail == "" && res.Plan == (schema.PlanSummary{}) {
			continue
		}
		if first.IsZero() || res.StartedAt.Before(first) {
			first = res.StartedAt
		}
		if res.FinishedAt.After(last) {
			last = res.FinishedAt
		}
		s.runs += res.FinishedAt.Sub(res.StartedAt)
	}
	s.validate += t.ValidatedAt.Sub(t.ReceivedAt)
	s.firstStart += first.Sub(t.ValidatedAt)
	s.makespan += last.Sub(first)
	s.tail += t.FinishedAt.Sub(last)
}

// String is the mean split of commits commits.
func (s *commitSplit) String(commits int) string {
	n := time.Duration(commits)
	return fmt.Sprintf("validate %v + until the first run %v + first start to last finish %v + after the last run %v",
		(s.validate / n).Round(time.Millisecond), (s.firstStart / n).Round(time.Millisecond),
		(s.makespan / n).Round(time.Millisecond), (s.tail / n).Round(time.Millisecond))
}

// barePool runs barePlanApply for every tenant with the configuration
// tf[tenant], r.workers at a time, and returns the pool's wall time and
// the sum of the runs' own times.
func (r *rig) barePool(tenants []string, tf map[string][]byte, vars map[string]string) (wall, sum time.Duration, err error) {
	work := make(chan string)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	for range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				d, err := r.barePlanApply(t, tf[t], vars[t])
				mu.Lock()
				sum += d
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, t := range tenants {
		work <- t
	}
	close(work)
	wg.Wait()
	wall = time.Since(start)
	if len(errs) > 0 {
		return 0, 0, fmt.Errorf("%d of %d bare runs failed, the first: %w", len(errs), len(tenants), errs[0])
	}
	return wall, sum, nil
}

// childCPU is the user and system CPU time of the child processes that
// have ended and been waited for: tofu and, through it, its providers.
func childCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
