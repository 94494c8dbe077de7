package reconcile

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
	"github.com/rezuscloud/rezuscloud/internal/manifestfleet"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Issue 16's bounds on the first load of 20,000 manifests by a server
// that has never seen them: seconds from the process's start to the
// decision, and its peak resident memory in MB (10^6 bytes).
const (
	firstLoadTarget    = 3.0
	firstLoadRSSTarget = 300
)

// firstLoadTenants is the tenants of BenchmarkServeFirstLoad's repository,
// ten manifests each: `-args -first-load N`.
var firstLoadTenants = 2000

func init() {
	flag.IntVar(&firstLoadTenants, "first-load", firstLoadTenants, "tenants of ten manifests each that BenchmarkServeFirstLoad serves (2,000: 20,000 manifests)")
}

// BenchmarkServeFirstLoad measures the first load of a large repository
// by the real `rezuscloud serve`: -first-load tenants of ten manifest
// files each (a Tenant, two NodeGroups and seven ConfigPatches; 20,000
// files by default), pushed to a real git daemon on loopback. Each op
// starts the server on a new data dir with --debounce 1h, so that the
// tenants are validated and queued and no tofu runs, and takes:
//
//   - validated-s: from the process's start to the commit's validatedAt,
//     the decision (the clone, the parse and schema checks of every file,
//     the checks across files, the provider modules' checks and the Talos
//     configs of every tenant);
//   - load-s: from the commit's receivedAt to its validatedAt;
//   - peak-RSS-MB: VmHWM two seconds after the decision;
//   - cpu-s: the process's CPU time until then;
//   - stop-s: how long a SIGTERM takes with every tenant still queued.
//
// Each metric is the highest of the ops. The benchmark fails when a
// figure misses issue 16's bound, or when the commit does not queue every
// tenant.
func BenchmarkServeFirstLoad(b *testing.B) {
	servertest.Binary(b) // built before the timer
	url, rev := pushManifestFleet(b, firstLoadTenants)
	b.ResetTimer()
	var worst firstLoad
	for range b.N {
		got := serveFirstLoad(b, url, rev)
		b.Logf("%d manifests: validated %.3f s after the start (load %.3f s), %.2f s of CPU, peak RSS %.1f MB, stopped in %.3f s with %d tenants queued; data dir (MiB): %s",
			10*firstLoadTenants, got.validated, got.load, got.cpu, got.peakMB, got.stop, firstLoadTenants, got.dataDir)
		worst = worst.max(got)
	}
	b.ReportMetric(worst.validated, "validated-s")
	b.ReportMetric(worst.load, "load-s")
	b.ReportMetric(worst.peakMB, "peak-RSS-MB")
	b.ReportMetric(worst.cpu, "cpu-s")
	b.ReportMetric(worst.stop, "stop-s")
	if worst.validated >= firstLoadTarget {
		b.Errorf("the first load took %.3f s from the server's start, want < %.0f s", worst.validated, firstLoadTarget)
	}
	if worst.peakMB >= firstLoadRSSTarget {
		b.Errorf("peak RSS %.1f MB, want < %d MB", worst.peakMB, firstLoadRSSTarget)
	}
}

// firstLoad is what one first load measured.
type firstLoad struct {
	validated, load, cpu, peakMB, stop float64
	dataDir                            string
}

func (f firstLoad) max(g firstLoad) firstLoad {
	return firstLoad{validated: max(f.validated, g.validated), load: max(f.load, g.load), cpu: max(f.cpu, g.cpu),
		peakMB: max(f.peakMB, g.peakMB), stop: max(f.stop, g.stop), dataDir: g.dataDir}
}

// serveFirstLoad starts the server on a new data dir, waits for its
// decision on rev and stops it.
func serveFirstLoad(b *testing.B, url, rev string) firstLoad {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data := filepath.Join(b.TempDir(), "data")
	srv := newServe(b, servertest.Options{Data: data, Repo: url, SimCloud: true, Args: []string{"--poll-interval", "1h", "--debounce", "1h"}})
	start := time.Now()
	srv.Start()
	c := srv.waitDecision(b, ctx, rev)
	if c.Status.Phase != schema.CommitPlanning || len(c.Status.Tenants) != firstLoadTenants {
		b.Fatalf("%s\n%s", describe(c), srv.Tail(40))
	}
	time.Sleep(2 * time.Second) // what follows the decision counts towards the peak
	got := firstLoad{
		validated: c.Status.Timings.ValidatedAt.Sub(start).Seconds(),
		load:      c.Status.Timings.ValidatedAt.Sub(c.Status.Timings.ReceivedAt).Seconds(),
		cpu:       procCPU(b, srv.Pid()).Seconds(),
		peakMB:    srv.mb("VmHWM"),
	}
	stopping := time.Now()
	srv.Stop()
	got.stop = time.Since(stopping).Seconds()
	got.dataDir = duMiB(data)
	return got
}

// waitDecision polls the commit rev until its validation is over.
func (p *serveProc) waitDecision(b *testing.B, ctx context.Context, rev string) *schema.Commit {
	b.Helper()
	for {
		var c schema.Commit
		err := p.getJSON(ctx, "/api/v1/commits/"+rev, &c)
		if err == nil && c.Status.Phase != schema.CommitPending && c.Status.Phase != schema.CommitValidating {
			return &c
		}
		select {
		case <-ctx.Done():
			b.Fatalf("no decision on %s in time (last error %v)\n%s", rev, err, p.Tail(40))
		case <-p.Done():
			b.Fatalf("rezuscloud serve exited\n%s", p.Tail(40))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// procCPU returns the user and system CPU time of process pid.
func procCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// pushManifestFleet pushes n tenants of ten manifest files each to a
// git daemon on loopback and returns the repository's URL and commit.
func pushManifestFleet(b *testing.B, n int) (url, rev string) {
	b.Helper()
	d := gittest.NewDaemon(b)
	d.CreateBare("fleet.git")
	w := gittest.NewWorkdir(b, d.URL("fleet.git"))
	if err := manifestfleet.TenFiles(n).WriteDir(w.Dir()); err != nil {
		b.Fatal(err)
	}
	rev = w.Commit("the fleet")
	w.Push()
	return d.URL("fleet.git"), rev
}
