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

// Targets of issue 4 §8.
const (
	// A no-change commit must cost at most 1/100 of a CI pipeline's
	// `tofu plan` in every workspace.
	noChangeTarget = 100.0
	// One changed tenant must take at most 1.2× a bare plan and apply.
	oneChangeTarget = 1.2
)

// BenchmarkNoChangeCommit measures (a): a commit whose manifests equal the
// applied ones, against the baseline of a CI pipeline that runs `tofu plan`
// in each of the fleet's workspaces, one after the other.
//
// reconcile: one op is one no-change commit of the whole fleet; it must
// start no tofu process. ci-tofu-plan: one op is `tofu plan` in all
// fleetSize workspaces; its x-reconcile metric is how many times dearer it
// is than the reconcile.
func BenchmarkNoChangeCommit(b *testing.B) {
	r := fleetRig(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	b.Logf("initial apply of %d tenants (%d machines): %v", fleetSize, r.fleet.Machines(), r.setup.Round(time.Millisecond))

	var reconcileNs float64
	b.Run("reconcile", func(b *testing.B) {
		defer profile(b)()
		before := r.runs()
		for range b.N {
			c, err := r.reconcile(r.fleet)
			if err != nil {
				b.Fatal(err)
			}
			if c.Status.Phase != schema.CommitSucceeded || len(c.Status.Tenants) != fleetSize {
				b.Fatalf("no-change commit: %s", describe(c))
			}
			for _, res := range c.Status.Tenants {
				if res.Plan != (schema.PlanSummary{}) || res.OutputTail != "" {
					b.Fatalf("no-change commit ran tofu for tenant %s: plan %+v", res.Tenant, res.Plan)
				}
			}
		}
		elapsed := b.Elapsed()
		runs := r.runs() - before
		b.ReportMetric(float64(runs)/float64(b.N), "tofu-runs/op")
		if runs != 0 {
			b.Fatalf("%d no-change commits started %d tofu processes, want none", b.N, runs)
		}
		reconcileNs = float64(elapsed.Nanoseconds()) / float64(b.N)
	})

	b.Run("ci-tofu-plan", func(b *testing.B) {
		// A CI pipeline has the tenants' secrets in its environment: the
		// var files are written before the clock starts.
		vars := make([]string, fleetSize)
		for i := range fleetSize {
			vars[i] = r.varFile(b, r.fleet, TenantName(i))
		}
		b.ResetTimer()
		for range b.N {
			for i := range fleetSize {
				tenant := TenantName(i)
				// -detailed-exitcode: 0 is "no changes", 2 is changes.
				if code, err := r.tofuRun(tenant, "plan", "-input=false", "-detailed-exitcode", "-var-file="+vars[i]); code != 0 {
					b.Fatalf("tofu plan in %s exited %d, want 0 (no changes): %v", tenant, code, err)
				}
			}
		}
		perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(perOp/float64(fleetSize)/1e9, "s/workspace")
		if reconcileNs > 0 {
			ratio := perOp / reconcileNs
			b.ReportMetric(ratio, "x-reconcile")
			b.Logf("a no-change commit costs %.1f ms; tofu plan in %d workspaces %.1f s: %.0f× cheaper (target ≥ %.0f×)",
				reconcileNs/1e6, fleetSize, perOp/1e9, ratio, noChangeTarget)
			if ratio < noChangeTarget {
				b.Errorf("a no-change commit is only %.1f× cheaper than the CI baseline, want ≥ %.0f×", ratio, noChangeTarget)
			}
		}
	})
}

// changeTenant is the tenant whose worker count BenchmarkOneTenantChange
// moves between DefaultWorkers and DefaultWorkers+1: t042 in the fleet of
// 100.
func changeTenantOf(size int) string { return TenantName(min(42, size-1)) }

// BenchmarkOneTenantChange measures (b): a commit that changes one
// tenant's worker count, against a bare `tofu plan -out && tofu apply` of
// the same change in the same workspace, with the same environment.
//
// One op is -rounds rounds (default 5) of four steps on one tenant, so that
// each side adds one machine and destroys one, interleaved so that load
// from elsewhere on the machine hits both alike:
//
//	reconcile   workers 2→3  (add)
//	bare tofu   workers 3→2  (destroy)
//	bare tofu   workers 2→3  (add)
//	reconcile   workers 3→2  (destroy)
//
// ns/op is the median wall time of Reconcile for one changed tenant (load
// and validate the fleet, render, diff, tofu, project); bare-ns/op the
// median bare plan+apply; x-bare their ratio. The *-s/change metrics split
// the reconcile's time by tofu command (init, plan, show, apply) and the
// rest (other).
func BenchmarkOneTenantChange(b *testing.B) {
	r := fleetRig(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	changeTenant := changeTenantOf(fleetSize)
	base := r.fleet.WorkersOf(changeTenant)
	low, high := r.fleet.With(changeTenant, base), r.fleet.With(changeTenant, base+1)
	// The bare runs use the configurations the reconciler rendered for the
	// two worker counts.
	main := filepath.Join(r.workDir(changeTenant), render.MainFile)
	lowTF := mustRead(b, main)
	vars := r.varFile(b, low, changeTenant)
	var highTF []byte

	var recTimes, bareTimes []time.Duration
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
		before := r.runs()
		start := time.Now()
		c, err := r.reconcile(f)
		recTimes = append(recTimes, time.Since(start))
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
		if err := os.WriteFile(main, tf, 0o600); err != nil {
			b.Fatal(err)
		}
		plan := "bare.tfplan"
		start := time.Now()
		code, err := r.tofuRun(changeTenant, "plan", "-input=false", "-detailed-exitcode", "-var-file="+vars, "-out="+plan)
		if code != 2 {
			b.Fatalf("bare tofu plan exited %d, want 2 (changes): %v", code, err)
		}
		if _, err := r.tofuRun(changeTenant, "apply", "-input=false", plan); err != nil {
			b.Fatal(err)
		}
		bareTimes = append(bareTimes, time.Since(start))
		os.Remove(filepath.Join(r.workDir(changeTenant), plan))
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
	b.Logf("one changed tenant: reconcile median %v (%d runs), bare tofu plan+apply median %v (%d runs): %.2f× (target ≤ %.1f×); reconcile %s",
		rec.Round(time.Millisecond), len(recTimes), bareMed.Round(time.Millisecond), len(bareTimes), ratio, oneChangeTarget, breakdown)
	if ratio > oneChangeTarget {
		b.Errorf("one changed tenant takes %.2f× a bare tofu plan+apply, want ≤ %.1f×", ratio, oneChangeTarget)
	}
}

func mustRead(b *testing.B, p string) []byte {
	b.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
