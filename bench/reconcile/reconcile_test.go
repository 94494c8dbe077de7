package reconcile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Targets of issue 4 §8 and issue 16.
const (
	// A no-change commit must cost at most 1/100 of a CI pipeline's
	// `tofu plan` in every workspace; from 1,000 tenants up, at most
	// 1/500 and less than 300 ms.
	noChangeTarget     = 100.0
	noChangeTarget1000 = 500.0
	noChangeLimit1000  = 300 * time.Millisecond
	oneChangeTarget    = 1.2 // × a bare plan and apply
	manyChangeTarget   = 1.1 // × the bare runs, run W at a time
	targetsOf1000Reach = 1000
)

// BenchmarkFleet runs, for each size of -fleet (growing: the rig adds the
// tenants of the next size to the applied fleet), these sub-benchmarks:
//
//	tenants=N/no-change     a commit whose manifests equal the applied ones
//	tenants=N/ci-tofu-plan  `tofu plan` in each of the N workspaces, one after the other
//	tenants=N/one-change    one tenant's worker count, against a bare plan and apply
//	tenants=N/many-change   -many tenants' worker counts in one commit, against
//	                        their bare plans and applies run W at a time; at
//	                        the size -many-fleet only (default: the first)
//
// Select parts with -bench, e.g. 'Fleet/tenants=1000/(no|one)'.
func BenchmarkFleet(b *testing.B) {
	r := fleetRig(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range fleetSizes {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			r.grow(b, n)
			reconcileNs := 0.0
			b.Run("no-change", func(b *testing.B) { reconcileNs = benchNoChange(b, r) })
			b.Run("ci-tofu-plan", func(b *testing.B) { benchCIPlan(b, r, reconcileNs) })
			b.Run("one-change", func(b *testing.B) { benchOneChange(b, r) })
			if n == manyFleet || manyFleet == 0 && n == fleetSizes[0] {
				b.Run("many-change", func(b *testing.B) { benchManyChange(b, r) })
			}
		})
	}
}

// benchNoChange measures a commit whose manifests equal the applied ones;
// it must start no tofu process. It returns the mean ns of one commit.
func benchNoChange(b *testing.B, r *rig) float64 {
	defer profile(b)()
	n := r.fleet.Tenants
	before := r.runs()
	for range b.N {
		c, err := r.reconcile(r.fleet)
		if err != nil {
			b.Fatal(err)
		}
		if c.Status.Phase != schema.CommitSucceeded || len(c.Status.Tenants) != n {
			b.Fatalf("no-change commit: %s", describe(c))
		}
		for _, res := range c.Status.Tenants {
			if res.Plan != (schema.PlanSummary{}) || res.OutputTail != "" {
				b.Fatalf("no-change commit ran tofu for tenant %s: plan %+v\n%s", res.Tenant, res.Plan, res.OutputTail)
			}
		}
	}
	elapsed := b.Elapsed()
	runs := r.runs() - before
	b.ReportMetric(float64(runs)/float64(b.N), "tofu-runs/op")
	if runs != 0 {
		b.Fatalf("%d no-change commits started %d tofu processes, want none", b.N, runs)
	}
	per := elapsed / time.Duration(b.N)
	b.ReportMetric(float64(per.Microseconds())/float64(n), "µs/tenant")
	if n >= targetsOf1000Reach && per >= noChangeLimit1000 {
		b.Errorf("a no-change commit of %d tenants takes %v, want < %v", n, per.Round(time.Millisecond), noChangeLimit1000)
	}
	return float64(per.Nanoseconds())
}

// benchCIPlan is the baseline of a no-change commit: a CI pipeline that
// runs `tofu plan` in each workspace, one after the other; x-reconcile is
// how many times dearer it is than the no-change commit.
func benchCIPlan(b *testing.B, r *rig, reconcileNs float64) {
	n := r.fleet.Tenants
	// A CI pipeline has the tenants' secrets in its environment: the var
	// files are written before the clock starts.
	vars := make([]string, n)
	for i := range n {
		vars[i] = r.varFile(b, r.fleet, TenantName(i))
	}
	b.ResetTimer()
	for range b.N {
		for i := range n {
			tenant := TenantName(i)
			// -detailed-exitcode: 0 is "no changes", 2 is changes.
			if code, err := r.tofuRun(tenant, "plan", "-input=false", "-detailed-exitcode", "-var-file="+vars[i]); code != 0 {
				b.Fatalf("tofu plan in %s exited %d, want 0 (no changes): %v", tenant, code, err)
			}
		}
	}
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp/float64(n)/1e9, "s/workspace")
	if reconcileNs <= 0 {
		return
	}
	target := noChangeTarget
	if n >= targetsOf1000Reach {
		target = noChangeTarget1000
	}
	ratio := perOp / reconcileNs
	b.ReportMetric(ratio, "x-reconcile")
	b.Logf("a no-change commit costs %.1f ms; tofu plan in %d workspaces %.1f s: %.0f× cheaper (target ≥ %.0f×)",
		reconcileNs/1e6, n, perOp/1e9, ratio, target)
	if ratio < target {
		b.Errorf("a no-change commit is only %.1f× cheaper than the CI baseline, want ≥ %.0f×", ratio, target)
	}
}

// changeTenantOf is the tenant whose worker count the one-change benchmark
// moves up by one and back: t042 in a fleet of 100 or more.
func changeTenantOf(size int) string { return TenantName(min(42, size-1)) }

// benchOneChange measures a commit that changes one tenant's worker count,
// against a bare `tofu plan -out && tofu apply` of the same change in the
// same workspace, with the same environment.
//
// One op is -rounds rounds (default 5) of four steps on one tenant, so that
// each side adds one machine and destroys one, interleaved so that load
// from elsewhere on the machine hits both alike:
//
//	reconcile   workers w→w+1  (add)
//	bare tofu   workers w+1→w  (destroy)
//	bare tofu   workers w→w+1  (add)
//	reconcile   workers w+1→w  (destroy)
//
// ns/op is the median wall time of Reconcile for one changed tenant (load
// and validate the fleet, render, diff, tofu, project); bare-ns/op the
// median bare plan+apply; x-bare their ratio. The *-s/change metrics split
// the reconcile's time by tofu command (init, plan, show, apply) and the
// rest (other).
func benchOneChange(b *testing.B, r *rig) {
	changeTenant := changeTenantOf(r.fleet.Tenants)
	base := r.fleet.WorkersOf(changeTenant)
	low, high := r.fleet.With(changeTenant, base), r.fleet.With(changeTenant, base+1)
	// The bare runs use the configurations the reconciler rendered for the
	// two worker counts.
	main := filepath.Join(r.workDir(changeTenant), render.MainFile)
	lowTF := mustRead(b, main)
	vars := r.varFile(b, low, changeTenant)
	var highTF []byte

	var recTimes, bareTimes []time.Duration
	var recCPU, bareCPU time.Duration // of the tofu processes, see childCPU
	// phases splits each reconcile by the Commit's own timings: loading
	// and validating the fleet, waiting in the queue until the changed
	// tenant starts, the changed tenant's run, and the rest of the fleet
	// finishing after it.
	var phases [4]time.Duration
	sum0, count0, err := r.tofuSeconds()
	if err != nil {
		b.Fatal(err)
	}
	reconcileTo := func(f Fleet, add, destroy int) {
		before, cpu := r.runs(), childCPU()
		start := time.Now()
		c, err := r.reconcile(f)
		recTimes = append(recTimes, time.Since(start))
		recCPU += childCPU() - cpu
		if err != nil {
			b.Fatal(err)
		}
		if c.Status.Phase != schema.CommitSucceeded {
			b.Fatalf("%s", describe(c))
		}
		for _, res := range c.Status.Tenants {
			changed := res.Tenant == changeTenant
			if changed {
				t := c.Status.Timings
				phases[0] += t.ValidatedAt.Sub(t.ReceivedAt)
				phases[1] += res.StartedAt.Sub(t.ValidatedAt)
				phases[2] += res.FinishedAt.Sub(res.StartedAt)
				phases[3] += t.FinishedAt.Sub(res.FinishedAt)
			}
			if changed && (res.Plan.Add != add || res.Plan.Destroy != destroy || res.Plan.Change != 0) {
				b.Fatalf("tenant %s planned %+v, want +%d -%d", res.Tenant, res.Plan, add, destroy)
			}
			if !changed && res.OutputTail != "" {
				b.Fatalf("tenant %s ran tofu, though only %s changed", res.Tenant, changeTenant)
			}
		}
		if r.runs() == before {
			b.Fatal("a changed tenant started no tofu process")
		}
		got := mustRead(b, main)
		switch {
		case add == 1 && highTF == nil:
			highTF = got
		case add == 1 && !bytes.Equal(got, highTF), add == 0 && !bytes.Equal(got, lowTF):
			b.Fatalf("the reconciler rendered %s differently for the same manifests", main)
		}
	}
	bare := func(tf []byte) {
		cpu := childCPU()
		defer func() { bareCPU += childCPU() - cpu }()
		d, err := r.barePlanApply(changeTenant, tf, vars)
		if err != nil {
			b.Fatal(err)
		}
		bareTimes = append(bareTimes, d)
	}

	stopProfile := profile(b)
	b.ResetTimer()
	for range b.N * rounds {
		reconcileTo(high, 1, 0)
		bare(lowTF)
		bare(highTF)
		reconcileTo(low, 0, 1)
	}
	b.StopTimer()
	stopProfile()
	if err := r.checkMachines(low.Machines()); err != nil {
		b.Fatal(err)
	}
	if code, err := r.tofuRun(changeTenant, "plan", "-input=false", "-detailed-exitcode", "-var-file="+vars); code != 0 {
		b.Fatalf("after the last reconcile, tofu plan in %s exited %d, want 0 (no changes): %v", changeTenant, code, err)
	}

	sum1, count1, err := r.tofuSeconds()
	if err != nil {
		b.Fatal(err)
	}
	n := float64(len(recTimes))
	var mean, tofu float64
	for _, d := range recTimes {
		mean += d.Seconds() / n
	}
	for _, cmd := range []string{"init", "plan", "show", "apply"} {
		s := (sum1[cmd] - sum0[cmd]) / n
		tofu += s
		b.ReportMetric(s, cmd+"-s/change")
		b.ReportMetric(float64(count1[cmd]-count0[cmd])/n, cmd+"-runs/change")
	}
	b.ReportMetric(mean-tofu, "other-s/change")
	b.ReportMetric(phases[1].Seconds()/n, "queue-s/change")
	breakdown := fmt.Sprintf("mean %.3fs = validate %.3fs + queue %.3fs + %s %.3fs + rest of the fleet %.3fs; %s's run = other %.3fs",
		mean, phases[0].Seconds()/n, phases[1].Seconds()/n, changeTenant, phases[2].Seconds()/n, phases[3].Seconds()/n, changeTenant, phases[2].Seconds()/n-tofu)
	for _, cmd := range []string{"init", "plan", "show", "apply"} {
		breakdown += fmt.Sprintf(" + %s %.3fs (%.1f runs)", cmd, (sum1[cmd]-sum0[cmd])/n, float64(count1[cmd]-count0[cmd])/n)
	}

	rec, bareMed := median(recTimes), median(bareTimes)
	ratio := rec.Seconds() / bareMed.Seconds()
	b.ReportMetric(float64(rec.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(bareMed.Nanoseconds()), "bare-ns/op")
	b.ReportMetric(ratio, "x-bare")
	b.ReportMetric(recCPU.Seconds()/bareCPU.Seconds(), "x-tofu-cpu")
	breakdown += fmt.Sprintf("; CPU of the tofu processes per change: reconcile %.3fs, bare %.3fs", recCPU.Seconds()/n, bareCPU.Seconds()/float64(len(bareTimes)))
	b.Logf("one changed tenant of %d: reconcile median %v (%d runs), bare tofu plan+apply median %v (%d runs): %.2f× (target ≤ %.1f×); reconcile %s",
		r.fleet.Tenants, rec.Round(time.Millisecond), len(recTimes), bareMed.Round(time.Millisecond), len(bareTimes), ratio, oneChangeTarget, breakdown)
	if ratio > oneChangeTarget {
		b.Errorf("one changed tenant takes %.2f× a bare tofu plan+apply, want ≤ %.1f×", ratio, oneChangeTarget)
	}
}

// barePlanApply writes tf as tenant's main.tf.json and runs a bare `tofu
// plan -out` (which must find changes) and `tofu apply` of the plan in its
// work directory, and returns how long the two took.
func (r *rig) barePlanApply(tenant string, tf []byte, vars string) (time.Duration, error) {
	main := filepath.Join(r.workDir(tenant), render.MainFile)
	if err := os.WriteFile(main, tf, 0o600); err != nil {
		return 0, err
	}
	plan := "bare.tfplan"
	start := time.Now()
	code, err := r.tofuRun(tenant, "plan", "-input=false", "-detailed-exitcode", "-var-file="+vars, "-out="+plan)
	if code != 2 {
		return 0, fmt.Errorf("bare tofu plan in %s exited %d, want 2 (changes): %v", tenant, code, err)
	}
	if _, err := r.tofuRun(tenant, "apply", "-input=false", plan); err != nil {
		return 0, err
	}
	took := time.Since(start)
	os.Remove(filepath.Join(r.workDir(tenant), plan))
	return took, nil
}

func mustRead(b *testing.B, p string) []byte {
	b.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
