package drift

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/bench/reconcile"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// Targets of drift detection.
const (
	// A sweep may cost at most 1.1× bare refresh-only plans.
	sweepTarget = 1.1
	// A sweep may delay an apply that arrives during it by less than 1 s.
	delayTarget = time.Second
)

var (
	fleetSize = 100
	workers   = reconciler.DefaultDriftWorkers
	rounds    = 5
)

func init() {
	flag.IntVar(&fleetSize, "fleet", fleetSize, "tenants of the benchmark fleet")
	flag.IntVar(&workers, "workers", workers, "drift checks at once, and bare plans at once in the baseline")
	flag.IntVar(&rounds, "rounds", rounds, "applies during a sweep that BenchmarkApplyDuringSweep times")
}

// rig is a reconciler wired to a real state backend on loopback, the real
// tofu and the real sim provider, with the fleet applied once. Drift
// checks run only when a benchmark asks (no interval).
type rig struct {
	dir, tofu, cli, simDir string
	srv                    *servertest.Backend
	rec                    *reconciler.Reconciler
	fleet                  reconcile.Fleet
	rev                    int
}

var (
	sharedOnce sync.Once
	shared     *rig
	sharedErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.close()
	}
	os.Exit(code)
}

func fleetRig(b *testing.B) *rig {
	b.Helper()
	sharedOnce.Do(func() {
		shared, sharedErr = newRig(testenv.Tofu(b), testenv.ProviderMirror(b))
		if sharedErr != nil {
			return
		}
		start := time.Now()
		var c *schema.Commit
		c, sharedErr = shared.reconcile(reconcile.Fleet{Tenants: fleetSize})
		if sharedErr == nil && c.Status.Phase != schema.CommitSucceeded {
			sharedErr = fmt.Errorf("initial apply: phase %s: %s", c.Status.Phase, c.Status.Message)
		}
		b.Logf("initial apply of %d tenants: %v", fleetSize, time.Since(start).Round(time.Millisecond))
	})
	if sharedErr != nil {
		b.Fatal(sharedErr)
	}
	return shared
}

func newRig(tofuBin, mirror string) (*rig, error) {
	dir, err := os.MkdirTemp("", "rezuscloud-bench-drift-")
	if err != nil {
		return nil, err
	}
	r := &rig{dir: dir, tofu: tofuBin, cli: filepath.Join(dir, "tofu.rc"), simDir: filepath.Join(dir, "sim")}
	fail := func(err error) (*rig, error) { r.close(); return nil, err }
	data := filepath.Join(dir, "data")
	if r.srv, err = servertest.OpenBackend(backend.Config{DataDir: data}, nil); err != nil {
		return fail(err)
	}
	if err := tfcli.WriteCLIConfig(r.cli, tfcli.CLIConfig{MirrorDir: mirror}); err != nil {
		return fail(err)
	}
	runner, err := tofu.NewRunner(tofu.Options{Binary: tofuBin, CLIConfigFile: r.cli, Env: map[string]string{"REZUSSIM_DIR": r.simDir}})
	if err != nil {
		return fail(err)
	}
	r.rec, err = reconciler.New(r.srv.Store(), runner, render.Builtin(), reconciler.Options{
		DataDir: data, StateURL: r.srv.URL(), Workers: 2, DriftWorkers: workers,
	})
	if err != nil {
		return fail(err)
	}
	return r, nil
}

func (r *rig) close() {
	if r.rec != nil {
		r.rec.Close()
	}
	if r.srv != nil {
		r.srv.Close()
	}
	os.RemoveAll(r.dir)
}

func (r *rig) reconcile(fleet reconcile.Fleet) (*schema.Commit, error) {
	r.rev++
	r.fleet = fleet
	rev := fmt.Sprintf("bench-%05d", r.rev)
	return r.rec.Reconcile(context.Background(), sources.Snapshot{
		Revision: rev, Ref: "refs/heads/main", Message: "benchmark commit " + rev, FS: fleet.MapFS(), Root: ".",
	})
}

// varFile writes the values of tenant's sensitive variables where a bare
// plan reads them (Fleet.WriteVarFile), with the secrets bundle the
// reconciler reads from the tenant's state, and returns its path.
func (r *rig) varFile(b *testing.B, tenant string) string {
	b.Helper()
	path, err := r.fleet.WriteVarFile(tenant, r.rec.TalosBundle(tenant), r.dir)
	if err != nil {
		b.Fatalf("var file of %s: %v", tenant, err)
	}
	return path
}

// barePlan runs `tofu plan -refresh-only` in tenant's work directory with
// the environment the reconciler gives tofu.
func (r *rig) barePlan(tenant, vars string) error {
	cmd := exec.Command(r.tofu, "plan", "-refresh-only", "-input=false", "-detailed-exitcode", "-var-file="+vars)
	cmd.Dir = filepath.Join(r.dir, "data", "work", tenant)
	addr := r.srv.URL() + "/tfstate/" + tenant
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TF_CLI_CONFIG_FILE=" + r.cli,
		"CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1", "TF_HTTP_ADDRESS=" + addr, "TF_HTTP_LOCK_ADDRESS=" + addr,
		"TF_HTTP_UNLOCK_ADDRESS=" + addr, "REZUSSIM_DIR=" + r.simDir}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bare plan -refresh-only in %s: %v\n%s", tenant, err, out.Bytes())
	}
	return nil
}

// BenchmarkDriftSweep: one op is a drift sweep of the whole fleet (the
// reconciler's DriftSweep: per tenant, its workspace, then
// `tofu plan -refresh-only -json` with the state lock), against the
// baseline of bare `tofu plan -refresh-only` runs in the same workspaces,
// as many at once as the drift queue runs checks. Its x-bare metric is the
// ratio of the two.
func BenchmarkDriftSweep(b *testing.B) {
	r := fleetRig(b)
	names := make([]string, fleetSize)
	vars := make([]string, fleetSize)
	for i := range names {
		names[i] = reconcile.TenantName(i)
		vars[i] = r.varFile(b, names[i])
	}
	var sweep, bare time.Duration
	for range b.N {
		start := time.Now()
		if err := r.rec.DriftSweep(context.Background()); err != nil {
			b.Fatal(err)
		}
		sweep += time.Since(start)

		start = time.Now()
		if err := parallel(workers, len(names), func(i int) error { return r.barePlan(names[i], vars[i]) }); err != nil {
			b.Fatal(err)
		}
		bare += time.Since(start)
	}
	b.ReportMetric(sweep.Seconds()/float64(b.N), "sweep-s/op")
	b.ReportMetric(bare.Seconds()/float64(b.N), "bare-s/op")
	ratio := sweep.Seconds() / bare.Seconds()
	b.ReportMetric(ratio, "x-bare")
	b.Logf("sweep of %d tenants %v vs. %d bare refresh-only plans %v: %.2f× (target ≤ %.1f×)",
		fleetSize, (sweep / time.Duration(b.N)).Round(time.Millisecond), fleetSize, (bare / time.Duration(b.N)).Round(time.Millisecond), ratio, sweepTarget)
}

// parallel runs fn(0..n-1), k at once, and returns the first error.
func parallel(k, n int, fn func(int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
	next := make(chan int)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if errs == nil {
						errs = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// BenchmarkApplyDuringSweep: the delay a drift sweep adds to an apply.
// While one sweep of the fleet runs, -rounds commits each add a worker to
// one tenant and are timed; once the sweep is over, each tenant goes back
// and the same change is timed again alone. The delay of a round is the
// difference; a round whose apply did not end before the sweep did is not
// counted. An apply waits for its own tenant's check when that one is
// under way, and shares the machine with the sweep's tofu meanwhile. Its
// metrics are the median and the largest delay.
func BenchmarkApplyDuringSweep(b *testing.B) {
	r := fleetRig(b)
	var delays []time.Duration
	for range b.N {
		tenants := make([]string, rounds)
		for i := range tenants {
			tenants[i] = reconcile.TenantName((i*37 + 11) % fleetSize)
		}
		var swept sync.WaitGroup
		var sweepErr error
		over := make(chan struct{})
		swept.Add(1)
		go func() { defer swept.Done(); sweepErr = r.rec.DriftSweep(context.Background()); close(over) }()
		time.Sleep(500 * time.Millisecond) // checks are under way
		var during []time.Duration
		for _, tenant := range tenants {
			d := r.timeScale(b, tenant)
			select {
			case <-over:
			default:
				during = append(during, d)
				continue
			}
			break
		}
		swept.Wait()
		if sweepErr != nil {
			b.Fatal(sweepErr)
		}
		for i, d := range during {
			r.timeScale(b, tenants[i]) // back, so that the timed change is the same one
			alone := r.timeScale(b, tenants[i])
			delays = append(delays, d-alone)
			b.Logf("tenant %s: apply during a sweep %v, alone %v", tenants[i], d.Round(time.Millisecond), alone.Round(time.Millisecond))
		}
	}
	if len(delays) == 0 {
		b.Fatal("no apply ended before its sweep: a larger -fleet makes the sweep last longer")
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	med, worst := delays[len(delays)/2], delays[len(delays)-1]
	b.ReportMetric(med.Seconds(), "median-delay-s")
	b.ReportMetric(worst.Seconds(), "max-delay-s")
	b.Logf("delay of an apply during a sweep, %d applies: median %v, max %v (target < %v)", len(delays), med.Round(time.Millisecond), worst.Round(time.Millisecond), delayTarget)
}

// timeScale commits one more worker for tenant (one fewer when it has more
// than the default) and returns how long the commit took to apply.
func (r *rig) timeScale(b *testing.B, tenant string) time.Duration {
	b.Helper()
	def := reconcile.Fleet{PerTenant: r.fleet.PerTenant}.WorkersOf(tenant) // the count no override sets
	n := r.fleet.WorkersOf(tenant) + 1
	if n > def+1 {
		n = def
	}
	start := time.Now()
	c, err := r.reconcile(r.fleet.With(tenant, n))
	if err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	if c.Status.Phase != schema.CommitSucceeded {
		b.Fatalf("scale %s: phase %s: %s", tenant, c.Status.Phase, c.Status.Message)
	}
	return d
}
